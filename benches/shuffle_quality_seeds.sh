#!/usr/bin/env bash
# Shuffle quality over ten seeds: runs the `shuffle_quality` example for seeds 1..10 (each draws
# new file sizes and new plans) and prints, per order, the min-max table of docs/performance.md.
#
#   benches/shuffle_quality_seeds.sh                  # 660 files, 900,000 samples, batch 64
#   SEEDS="1 2 3" benches/shuffle_quality_seeds.sh    # fewer seeds
set -euo pipefail

cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8 9 10"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cargo build --release --quiet --example shuffle_quality
BIN="${CARGO_TARGET_DIR:-target}/release/examples/shuffle_quality"
for seed in $SEEDS; do
  echo "seed $seed" >&2
  "$BIN" --files 660 --samples 900000 --batch 64 --seed "$seed" --json "$WORK/s$seed.json" >/dev/null
done

python3 - "$WORK"/s*.json <<'PY'
import json, sys

rows = {}
for path in sys.argv[1:]:
    for order in json.load(open(path))["orders"]:
        ratio = lambda part, key: part[key] / part["ideal_" + key]
        rows.setdefault(order["name"], []).append({
            "distinct": ratio(order, "distinct_files_per_batch"),
            "pair": ratio(order, "same_file_pair_rate"),
            "rho": abs(order["spearman"]),
            "first": ratio(order["first_window"], "distinct_files_per_batch"),
            "last": ratio(order["last_window"], "distinct_files_per_batch"),
            "last_pair": ratio(order["last_window"], "same_file_pair_rate"),
        })
print(f"{len(sys.argv) - 1} seeds")
print("| order | distinct x ideal | P_same / P* | max \\|ρ\\| | min first / last window distinct x ideal | max last-window P_same / P* |")
print("|---|---|---|---|---|---|")
for name, runs in rows.items():
    span = lambda key, digits: f"{min(r[key] for r in runs):.{digits}f}–{max(r[key] for r in runs):.{digits}f}"
    print(f"| {name} | {span('distinct', 2)} | {span('pair', 2)} | {max(r['rho'] for r in runs):.4f} | "
          f"{min(r['first'] for r in runs):.2f} / {min(r['last'] for r in runs):.2f} | "
          f"{max(r['last_pair'] for r in runs):.2f} |")
PY
