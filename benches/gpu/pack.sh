#!/usr/bin/env bash
# Builds every binary benches/gpu/run.sh needs on a GPU machine without Rust, strips and
# compresses them into an ignored folder, and checks that they fit the 64 MiB a run carries.
#
#   benches/gpu/pack.sh                 # into .gpu/bin (ignored by git)
#   PACK_DIR=/tmp/gpu benches/gpu/pack.sh
#   benches/gpu/pack.sh --check         # are the packed binaries built from the sources as
#                                       # they are now? (exit 0: yes; 1: no, pack again)
#   AUTOTUNE=1 EXAMPLES="quickstart doctor metrics_throughput" benches/gpu/pack.sh
#                                       # and `quickstart_autotune`, built with kiln's `autotune`
#                                       # feature (Burn's kernel autotuning), for run.sh to compare;
#                                       # fewer examples, to stay within what a run carries
#
# Release builds with the `cuda` and `wgpu` features: the quickstart, doctor,
# metrics_throughput, diagnose, find_batch_size and sum_repeatability examples and
# kiln-ml-train's `trainer` test binary (its `cuda` tests run with `--ignored`). PACK_DIR/BUILT
# names the commit and the sources they were built from, and run.sh reports it in gpu.json. cudarc, Burn 0.21's CUDA layer, binds the CUDA
# API of the version it reads from `nvcc` at build time and falls back to a version newer than
# most drivers without one: CUDARC_CUDA_VERSION (default 13000, CUDA 13.0) names the driver's.
# Nothing CUDA is needed to build (libcuda and NVRTC are loaded at run time). Cold, on 2 cores:
# about 40 minutes. The binaries run here too (flex, lavapipe): `run.sh --dry-run` uses them.
set -euo pipefail

cd "$(dirname "$0")/../.."
PACK_DIR=${PACK_DIR:-.gpu/bin}
# A run carries the working tree too (its tracked and untracked files): the pack gets what the
# 64 MiB leave, less 1 MiB for the files a session adds.
tree_kb=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
LIMIT_MB=${LIMIT_MB:-$(((64 * 1024 - tree_kb - 1024) / 1024))}
export CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kiln-target}
read -r -a EXAMPLES <<<"${EXAMPLES:-quickstart doctor metrics_throughput diagnose find_batch_size sum_repeatability}"
AUTOTUNE=${AUTOTUNE:-0}

# What the binaries are built from: the content of every path a packed binary compiles, as it
# is in the working tree (committed or not; ignored files left out, as git leaves them), hashed
# through a scratch index, so a commit of what was packed does not make the pack stale.
SOURCES=(Cargo.toml Cargo.lock src crates examples)
sources_id() {
  local index tree
  index=$(mktemp)
  GIT_INDEX_FILE=$index git read-tree HEAD
  GIT_INDEX_FILE=$index git add -A -- "${SOURCES[@]}"
  tree=$(GIT_INDEX_FILE=$index git write-tree)
  rm -f "$index"
  git rev-parse "${SOURCES[@]/#/$tree:}" | sha1sum | cut -c1-16
}
# Everything run.sh runs: a pack made with fewer EXAMPLES is partial, and --check says so.
REQUIRED=(quickstart doctor metrics_throughput diagnose find_batch_size sum_repeatability trainer)
if [ "${1:-}" = --check ]; then
  recorded() { sed -n "s/^$1=//p" "$PACK_DIR/BUILT" 2>/dev/null || true; }
  built=$(recorded sources)
  now=$(sources_id)
  if [ -z "$built" ] || [ "$built" != "$now" ]; then
    echo "$PACK_DIR is stale or missing (built from ${built:-nothing}, sources now $now): run $0" >&2
    exit 1
  fi
  if [ "$(recorded CUDARC_CUDA_VERSION)" != "$CUDARC_CUDA_VERSION" ]; then
    echo "$PACK_DIR was built for CUDA $(recorded CUDARC_CUDA_VERSION), not $CUDARC_CUDA_VERSION: run $0" >&2
    exit 1
  fi
  # Every binary the record names is there and whole (BUILT is written after the size check).
  for binary in $(recorded binaries); do
    xz -t "$PACK_DIR/$binary.xz" 2>/dev/null || { echo "$PACK_DIR lacks a whole $binary.xz: run $0" >&2; exit 1; }
  done
  missing=()
  for binary in "${REQUIRED[@]}"; do
    [ -s "$PACK_DIR/$binary.xz" ] || missing+=("$binary")
  done
  [ ${#missing[@]} -eq 0 ] || echo "note: a partial pack, without ${missing[*]} (run.sh skips their steps)" >&2
  ls "$PACK_DIR"/*.deb >/dev/null 2>&1 || echo "note: no .deb files (the Vulkan steps need a loader on the GPU machine)" >&2
  echo "$PACK_DIR is current: $(tr '\n' ' ' <"$PACK_DIR/BUILT")"
  exit 0
fi
[ $# -eq 0 ] || { echo "unknown argument: $1 (--check, or none)" >&2; exit 2; }

# Packs every executable a cargo build (its JSON messages in $1) reports, by target name (the
# test binary's name carries a hash), under that name followed by $2.
pack() {
  python3 - "$1" >"$1.list" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"])
PY
  while read -r name path; do
    echo "   packing $name$2 ($(du -h "$path" | cut -f1))"
    strip -o "$PACK_DIR/$name$2" "$path"
    xz -6 -T0 -f "$PACK_DIR/$name$2"
  done <"$1.list"
  rm -f "$1.list"
}

# Built into a scratch folder and swapped in at the end: a failed or interrupted build leaves
# the old pack as it was (with its record, which says what it was built from).
FINAL_DIR=$PACK_DIR
mkdir -p "$(dirname "$FINAL_DIR")"
PACK_DIR=$(mktemp -d "${FINAL_DIR%/}.building.XXXXXX")
trap 'rm -rf "$PACK_DIR"' EXIT
cp "$FINAL_DIR"/*.deb "$PACK_DIR"/ 2>/dev/null || true
# What the build starts from: a change made while it runs makes the record say so.
commit=$(git rev-parse --short=12 HEAD)
sources=$(sources_id)
messages=$(mktemp)
trap 'rm -f "$messages"; rm -rf "$PACK_DIR"' EXIT
echo "== building (CUDARC_CUDA_VERSION=$CUDARC_CUDA_VERSION) into $CARGO_TARGET_DIR"
if [ "$AUTOTUNE" = 1 ]; then
  # First, so that the default build below is the one left in target/release/examples.
  cargo build --release --locked -p kiln-ml --features cuda,wgpu,autotune --example quickstart \
    --message-format=json-render-diagnostics >"$messages"
  pack "$messages" _autotune
fi
args=()
for example in "${EXAMPLES[@]}"; do args+=(--example "$example"); done
# One invocation, so Burn is built once with the union of the features.
cargo build --release --locked -p kiln-ml -p kiln-ml-train --features cuda,wgpu "${args[@]}" \
  --test trainer --message-format=json-render-diagnostics >"$messages"
pack "$messages" ""
# The Vulkan loader and the GL dispatch libraries NVIDIA's Vulkan driver loads through, for a GPU
# machine that may lack them (its driver brings the ICD itself). Unpacked by run.sh.
DEBS=(libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2)
if ! ls "$PACK_DIR"/*.deb >/dev/null 2>&1 && command -v apt-get >/dev/null; then
  lists=$(mktemp -d)
  mkdir -p "$lists/partial"
  apt_options=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
  if ! { apt-get "${apt_options[@]}" update -qq >/dev/null 2>&1 &&
    (cd "$PACK_DIR" && apt-get "${apt_options[@]}" download "${DEBS[@]}" >/dev/null 2>&1); }; then
    echo "   (${DEBS[*]} could not be downloaded: the wgpu step needs a Vulkan loader there)"
  fi
  rm -rf "$lists"
fi
total_kb=$(du -sk "$PACK_DIR" | cut -f1)
ls -la "$PACK_DIR"
echo "== $PACK_DIR: $((total_kb / 1024)) MiB (limit $LIMIT_MB MiB)"
if [ "$total_kb" -gt $((LIMIT_MB * 1024)) ]; then
  echo "too large to carry: drop an example from EXAMPLES or compress harder" >&2
  exit 1
fi
# If the sources changed while it built, the record says so and --check calls the pack stale.
[ "$(sources_id)" = "$sources" ] || sources="$sources+changed-during-the-build"
features=cuda,wgpu
[ "$AUTOTUNE" = 1 ] && features="$features (+autotune: quickstart_autotune)"
binaries=$(cd "$PACK_DIR" && ls -- *.xz | sed 's/\.xz$//' | tr '\n' ' ')
printf 'commit=%s\nsources=%s\nfeatures=%s\nbinaries=%s\nCUDARC_CUDA_VERSION=%s\nrustc=%s\npacked=%s\n' \
  "$commit" "$sources" "$features" "$binaries" "$CUDARC_CUDA_VERSION" "$(rustc -V)" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$PACK_DIR/BUILT"
rm -rf "$FINAL_DIR"
mv "$PACK_DIR" "$FINAL_DIR"
echo "== packed into $FINAL_DIR"
