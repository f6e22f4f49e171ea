#!/usr/bin/env bash
# kiln's f32 step at several run-ahead bounds (`--max-queued-steps`) against the plain Burn
# loop, on CUDA, alternating, in one short call: how issue 26's "kiln's step at most 1.05x the
# plain Burn loop's" was looked into (docs/performance.md, "Fourth H200 session").
#
#   bash benches/gpu/run_ahead_sweep.sh --out DIR [--cache PATH] [--runs "q2 q8 q0 plain ..."]
#                                       [--seconds 125] [--device cuda] [--args "..."]
#
# --cache: an earlier run.sh's cache.tar.xz (warm kernels; without it the first runs compile).
# --runs: `qN` is the quickstart with `--max-queued-steps N`, `plain` the plain Burn loop
# (default: plain q2 q8 q16 q0 plain q2 q8 q16 q0 plain: the baseline between rounds).
# kiln's runs read the loss once per epoch (`--log-every 0`), as the plain loop does, so only the
# bound differs. --seconds: no run starts after this many
# (default 125; each takes 12-20 s warm on an H200). Needs .gpu/bin/quickstart.xz from pack.sh
# (carry only that file and the cache: about 16 MB). Writes DIR/sweep.tar.xz (each run's JSON and
# log) and prints one line per run: order, run, exit status, ms a step after the first epoch,
# seconds, minADE@6. `--device cpu` tries it here (flex), `--device wgpu` on lavapipe; --args
# passes more quickstart arguments to every run (a smaller model and data set for lavapipe).
set -u
cd "$(dirname "$0")/../.."
source benches/gpu/env.sh
OUT="" CACHE="" RUNS="plain q2 q8 q16 q0 plain q2 q8 q16 q0 plain" SECONDS_LEFT=125 DEVICE=cuda ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECONDS_LEFT=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --args) ARGS=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "--out DIR is required" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(realpath "$OUT")
X=$(mktemp -d)
trap 'rm -rf "$X"' EXIT
xz -dc .gpu/bin/quickstart.xz >"$X/qs" && chmod +x "$X/qs" || { echo "no .gpu/bin/quickstart.xz: run benches/gpu/pack.sh" >&2; exit 1; }
find_nvrtc
use_kernel_cache "$X/cache" "$CACHE" || { echo "warning: --cache $CACHE unusable: the runs start cold" >&2; rm -rf "$X/cache"; use_kernel_cache "$X/cache" ""; }
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$X}
mkdir -p "$X/runs"
START=$SECONDS
n=0
for run in $RUNS; do
  [ $((SECONDS - START)) -lt "$SECONDS_LEFT" ] || { echo "-- time is up before run $((n + 1)) ($run)"; break; }
  n=$((n + 1))
  case $run in
    plain) extra=(--trainer plain-burn) ;;
    q[0-9]*) extra=(--max-queued-steps "${run#q}" --log-every 0) ;;
    *) echo "unknown run $run (qN or plain)" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2086 # --args is a list of arguments
  timeout -k 5 40 "$X/qs" --device "$DEVICE" --no-profile --dir "$X/data" $ARGS "${extra[@]}" \
    --json "$X/runs/$n-$run.json" >"$X/runs/$n-$run.log" 2>&1
  status=$?
  echo "$n $run exit $status $(python3 -c "import json; d=json.load(open('$X/runs/$n-$run.json')); print(round(d['step_ms'], 3), round(d['seconds'], 1), round(d['min_ade'], 5))" 2>/dev/null)"
done
# One file back, whatever ran: the runs' files stay in the scratch folder, not in $OUT.
tar -C "$X/runs" -cJf "$OUT/sweep.tar.xz" . || echo "warning: the runs' logs could not be packed" >&2
