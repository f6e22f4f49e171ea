"""Fails when a crate's modules import each other in a circle.

Builds each crate's module graph from its non-test code (`use` lines, re-exports resolved, and
with --inline also `crate::`/`super::` paths written in code) and prints every strongly
connected component. Usage: import_cycles.py [--inline] CRATE_DIR/src ...
"""
import os, re, sys
from collections import defaultdict

def items(group):
    # split "a::{B, C}, D" at top level
    out=[]; depth=0; cur=''
    for ch in group:
        if ch=='{': depth+=1
        if ch=='}': depth-=1
        if ch==',' and depth==0:
            out.append(cur.strip()); cur=''
        else: cur+=ch
    if cur.strip(): out.append(cur.strip())
    return out

def expand(path):
    # "a::b::{C, d::E}" -> ["a::b::C", "a::b::d::E"]
    path=re.sub(r'\s+','',path)
    m=re.match(r'^(.*?)\{(.*)\}$',path)
    if not m: return [path]
    pre=m.group(1); res=[]
    for it in items(m.group(2)):
        res+= [pre+x for x in expand(it)]
    return res

def crate_modules(src):
    mods={}
    for root,_,files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p=os.path.join(root,f); rel=os.path.relpath(p,src)[:-3]
            parts=rel.split(os.sep)
            if parts[-1] in ('mod','lib','main'): parts=parts[:-1]
            mods['::'.join(parts)]=p
    return mods

def uses(path):
    text=open(path).read()
    cut=text.find('#[cfg(test)]')
    if cut>=0: text=text[:cut]
    text=re.sub(r'//.*','',text)
    res=[]
    for m in re.finditer(r'\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);',text):
        for e in expand(m.group(2)):
            e=re.sub(r'\bas\s+\w+$','',e).replace(' as ',' ')
            res.append((bool(m.group(1)), e.split(' ')[0]))
    if INLINE:
        body=re.sub(r'\b(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;','',text)
        for m in re.finditer(r'\b((?:crate|super)(?:::\w+)+)',body):
            res.append((False, m.group(1)))
    return res

def analyze(src):
    mods=crate_modules(src)
    # re-export map: module -> name -> full path
    reexp=defaultdict(dict)
    for mod,p in mods.items():
        for pub,e in uses(p):
            if pub:
                reexp[mod][e.split('::')[-1]]=(mod,e)
    def absolute(mod, e):
        nonlocal_mods=mods
        segs=e.split('::')
        base=mod.split('::') if mod else []
        if segs[0]=='crate': cur=[]; segs=segs[1:]
        elif segs[0]=='self': cur=base; segs=segs[1:]
        elif segs[0]=='super':
            cur=base
            while segs and segs[0]=='super': cur=cur[:-1]; segs=segs[1:]
        elif '::'.join(base+[segs[0]]) in mods: cur=base
        else: return None
        return cur, segs
    def resolve(mod, e, depth=0):
        a=absolute(mod,e)
        if a is None or depth>10: return None
        cur,segs=a
        # walk down modules as far as they exist
        while segs and '::'.join(cur+[segs[0]]) in mods:
            cur=cur+[segs[0]]; segs=segs[1:]
        target='::'.join(cur)
        if segs and segs[0] in reexp.get(target,{}) and segs[0]!='*':
            m2,e2=reexp[target][segs[0]]
            r=resolve(m2,e2,depth+1)
            if r is not None: return r
        return target
    g=defaultdict(set)
    for mod,p in mods.items():
        for pub,e in uses(p):
            t=resolve(mod,e)
            if t is None or t==mod: continue
            # a module importing its own parent's re-exports of itself is fine; skip edges to ancestors that only declare
            g[mod].add(t)
    return mods,g

def cycles(g):
    # Tarjan SCC
    idx={}; low={}; st=[]; on=set(); out=[]; c=[0]
    def sc(v):
        idx[v]=low[v]=c[0]; c[0]+=1; st.append(v); on.add(v)
        for w in g.get(v,()):
            if w not in idx: sc(w); low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            comp=[]
            while True:
                w=st.pop(); on.discard(w); comp.append(w)
                if w==v: break
            if len(comp)>1: out.append(comp)
    for v in list(g): 
        if v not in idx: sc(v)
    return out

INLINE='--inline' in sys.argv
found=False
for src in [a for a in sys.argv[1:] if a!='--inline']:
    mods,g=analyze(src)
    cs=cycles(g)
    found=found or bool(cs)
    print(src, 'modules', len(mods), 'CYCLES' if cs else 'acyclic')
    for comp in cs:
        print('  ', sorted(comp))
        for v in comp:
            print('     ', v or '<root>', '->', sorted(x for x in g[v] if x in comp))
sys.exit(1 if found else 0)
