#!/usr/bin/env python3
"""Checks every install line in the docs against the workspace.

An install line is a `NAME = ...` dependency line for a crate whose name starts with `kiln`, in
a ```toml block or in inline code of README.md, docs/*.md or crates/*/README.md. Each must name a
package of this workspace (`kiln` and `kiln-core` on crates.io are other projects), and a
`path = "../kiln/..."` in it must point at that package's folder in a clone.
"""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def workspace_packages():
    """Package name -> folder relative to the root, for the facade and every member."""
    packages = {}
    for manifest in [ROOT / "Cargo.toml", *sorted(ROOT.glob("crates/*/Cargo.toml"))]:
        name = tomllib.loads(manifest.read_text())["package"]["name"]
        packages[name] = manifest.parent.relative_to(ROOT).as_posix()
    return packages


LINE = re.compile(r"^\s*#?\s*(kiln[\w-]*)\s*=\s*(.+)$")
INLINE = re.compile(r"`(kiln[\w-]*)\s*=\s*([^`]+)`")
PATH = re.compile(r'path\s*=\s*"\.\./kiln/?([^"]*)"')


def install_lines(text):
    """(line number, crate name, value) of each install line in a Markdown text."""
    in_toml = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_toml = line.strip() == "```toml"
            continue
        if in_toml:
            match = LINE.match(line)
            if match:
                yield number, match.group(1), match.group(2)
        else:
            for match in INLINE.finditer(line):
                yield number, match.group(1), match.group(2)


def main():
    packages = workspace_packages()
    docs = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("crates/*/README.md"))]
    problems = []
    checked = 0
    for doc in docs:
        where = doc.relative_to(ROOT)
        for number, name, value in install_lines(doc.read_text()):
            checked += 1
            if name not in packages:
                problems.append(f"{where}:{number}: `{name}` is not a crate of this workspace")
                continue
            path = PATH.search(value)
            if path and path.group(1).rstrip("/") != packages[name].removeprefix("."):
                problems.append(
                    f"{where}:{number}: `{name}` points at ../kiln/{path.group(1)}, "
                    f"its folder is {packages[name]}"
                )
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{checked} install lines checked in {len(docs)} files, {len(problems)} wrong")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
