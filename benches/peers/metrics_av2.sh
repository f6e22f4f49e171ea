#!/usr/bin/env bash
# kiln-ml-metrics against av2 and vectorized numpy on the same seeded data, one thread each.
#
#   benches/peers/metrics_av2.sh                 # N = 100000, K = 6, T = 60
#   N=20000 benches/peers/metrics_av2.sh         # smaller
#   benches/peers/metrics_av2.sh --joint 2 --trajectory-types
#                                                # scenes of 2 agents (av2's world functions,
#                                                # the actor miss rate) and Waymo's mAP
#
# Arguments are passed on to the `metrics_throughput` example. AV2_AGENTS (default N: the same
# agents on both sides) can bound the slow av2 loop (av2 scores about 13,000 agents/s here);
# while AV2_AGENTS >= N, kiln and av2 score the same agents and the JSON (PEERS_JSON=PATH) has
# `kiln_vs_av2_max_relative_difference`. KILN_PEERS_VENV picks the
# virtual environment (benches/peers/run.sh shares its own).
# Creates a virtual environment under ${KILN_PEERS_CACHE:-~/.cache/kiln-peers}, installs numpy
# and av2 there, runs kiln's `metrics_throughput` example (release build) with `--dump`, then
# `metrics_av2.py` on the dumped data: it checks that the numbers agree and prints the ratios.
#
# av2 is installed with `--no-deps` plus the two packages its metrics module imports (numpy,
# universal-pathlib): its full dependency list pulls torch, kornia, opencv and more, none of
# which the metrics need. If av2 cannot be installed, the script says so and compares with the
# numpy reference only.
set -euo pipefail

cd "$(dirname "$0")/../.."
N=${N:-100000}
K=${K:-6}
T=${T:-60}
SEED=${SEED:-42}
CACHE=${KILN_PEERS_CACHE:-$HOME/.cache/kiln-peers}
VENV=${KILN_PEERS_VENV:-$CACHE/venv-metrics}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install --quiet numpy universal-pathlib
if ! "$VENV/bin/python" -c "import av2.datasets.motion_forecasting.eval.metrics" 2>/dev/null; then
  if ! "$VENV/bin/python" -m pip install --quiet --no-deps av2; then
    echo "WARNING: av2 could not be installed; comparing with the numpy reference only" >&2
  fi
fi
if "$VENV/bin/python" -c "import av2.datasets.motion_forecasting.eval.metrics" 2>/dev/null; then
  echo "av2 $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("av2"))') available"
else
  echo "WARNING: av2 is not importable; comparing with the numpy reference only" >&2
fi

# One thread on both sides for the headline comparison.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1 VECLIB_MAXIMUM_THREADS=1

cargo run --release --quiet --example metrics_throughput -- \
  --n "$N" --k "$K" --t "$T" --seed "$SEED" --json "$WORK/kiln.json" --dump "$WORK/data" "$@"
"$VENV/bin/python" benches/peers/metrics_av2.py --data "$WORK/data" --kiln-json "$WORK/kiln.json" \
  --av2-agents "${AV2_AGENTS:-$N}" ${PEERS_JSON:+--json "$PEERS_JSON"}
