#!/usr/bin/env bash
# kiln against its peers, on the same files and the same forecasts, in one go.
#
#   benches/peers/run.sh                         # 660 files, 900 000 rows, batch 64, 2 workers
#   benches/peers/run.sh --json peers.json       # also write the combined figures
#   FILES=66 ROWS=90000 SECONDS_PER_READER=5 benches/peers/run.sh   # a quick look
#
# 1. Creates a virtual environment under ${KILN_PEERS_CACHE:-~/.cache/kiln-peers}/venv-peers with
#    numpy, pyarrow, torch (from PyPI) and av2 (its metrics module only; see metrics_av2.sh).
# 2. Writes the dataset with the `block_shuffle` example (`--dir`) and measures kiln's
#    sequential and block-shuffled loader on it (release build, `--workers`, `--batch-size`).
# 3. Runs `readers.py` on the same files: a pyarrow scan and three torch `DataLoader` readers
#    (random, sequential, shuffle buffer), each for one epoch or SECONDS_PER_READER seconds.
# 4. Alternates SCAN_ROUNDS (5) rounds of kiln's sequential epochs and pyarrow's scans: the
#    ratios to pyarrow are medians of these paired rounds.
# 5. Runs `metrics_av2.sh` on AGENTS forecasts with av2 scoring the same agents.
# 6. Prints one table of rates and ratios (`summary.py`) and the targets met or not.
#
# Everything stays on this machine; the temporary directory is removed at the end.
set -euo pipefail

cd "$(dirname "$0")/../.."
JSON_OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --json) JSON_OUT=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
FILES=${FILES:-660}
ROWS=${ROWS:-900000}
BATCH=${BATCH:-64}
WORKERS=${WORKERS:-2}
SECONDS_PER_READER=${SECONDS_PER_READER:-20}
SCAN_ROUNDS=${SCAN_ROUNDS:-5}
AGENTS=${AGENTS:-20000}
CACHE=${KILN_PEERS_CACHE:-$HOME/.cache/kiln-peers}
VENV="$CACHE/venv-peers"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install --quiet numpy pyarrow torch universal-pathlib
if ! "$VENV/bin/python" -c "import av2.datasets.motion_forecasting.eval.metrics" 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet --no-deps av2
fi
"$VENV/bin/python" -c 'import numpy, pyarrow, torch; print(f"numpy {numpy.__version__}, pyarrow {pyarrow.__version__}, torch {torch.__version__}")'

echo "== kiln loader (block_shuffle example) on $FILES files, $ROWS rows"
cargo run --release --quiet --example block_shuffle -- --files "$FILES" --rows "$ROWS" \
  --batch-size "$BATCH" --workers "$WORKERS" --dir "$WORK/data" --json "$WORK/kiln.json"

echo "== Python readers on the same files"
"$VENV/bin/python" benches/peers/readers.py --dir "$WORK/data" --batch-size "$BATCH" \
  --workers "$WORKERS" --seconds "$SECONDS_PER_READER" --json "$WORK/readers.json"

# kiln's sequential epochs and pyarrow's scans, alternating (which goes first alternates too):
# on a shared machine the speed moves by more than their difference between runs minutes
# apart, so their ratios are medians of these rounds' paired ratios.
PAIRS=()
for round in $(seq 1 "$SCAN_ROUNDS"); do
  echo "== kiln sequential against pyarrow's scans, round $round of $SCAN_ROUNDS"
  kiln_round() {
    cargo run --release --quiet --example block_shuffle -- --files "$FILES" --rows "$ROWS" \
      --batch-size "$BATCH" --workers "$WORKERS" --dir "$WORK/data" --only sequential \
      --repeats 3 --json "$WORK/kiln_sequential_$round.json" >/dev/null
  }
  scan_round() {
    "$VENV/bin/python" benches/peers/readers.py --dir "$WORK/data" --batch-size "$BATCH" \
      --workers "$WORKERS" --seconds "$SECONDS_PER_READER" --only-scans \
      --json "$WORK/scans_$round.json" >/dev/null
  }
  if [ $((round % 2)) -eq 1 ]; then kiln_round; scan_round; else scan_round; kiln_round; fi
  PAIRS+=("$WORK/kiln_sequential_$round.json" "$WORK/scans_$round.json")
done

echo "== kiln-ml-metrics against av2 on $AGENTS agents"
N="$AGENTS" AV2_AGENTS="$AGENTS" KILN_PEERS_VENV="$VENV" PEERS_JSON="$WORK/metrics.json" \
  bash benches/peers/metrics_av2.sh

"$VENV/bin/python" benches/peers/summary.py --kiln "$WORK/kiln.json" --readers "$WORK/readers.json" \
  --metrics "$WORK/metrics.json" --scan-rounds "${PAIRS[@]}" ${JSON_OUT:+--json "$JSON_OUT"}
