"""One table and one JSON from the peer runs of `benches/peers/run.sh`.

Inputs: the `block_shuffle` example's JSON (kiln's loader on the same files), `readers.py`'s
JSON (pyarrow and the torch readers) and `metrics_av2.py`'s JSON (kiln-ml-metrics against av2).
Prints the rates and ratios side by side and whether each target of the comparison is met.

With `--scan-rounds`, pairs of JSON files from rounds that alternate kiln's sequential epochs
(`block_shuffle --only sequential`) with pyarrow's scans (`readers.py --only-scans`): the ratios
to pyarrow are then the medians of the rounds' paired ratios, each taken seconds apart, rather
than one run's figures against another's minutes later.
"""

import argparse
import json
import statistics
from pathlib import Path


def scan_rounds(paths):
    """Each round's kiln sequential rate and pyarrow scans, from (kiln, scans) JSON pairs."""
    if len(paths) % 2:
        raise SystemExit("--scan-rounds takes pairs: kiln's JSON, then the scans' JSON")
    rounds = []
    for kiln_path, scans_path in zip(paths[::2], paths[1::2]):
        kiln = json.loads(Path(kiln_path).read_text())
        scans = json.loads(Path(scans_path).read_text())
        rounds.append({
            "kiln_sequential_rows_per_s": kiln["steady_rows_per_s"],
            "pyarrow_scan_rows_per_s": scans["pyarrow_scan"]["rows_per_s"],
            "pyarrow_scan_threaded_rows_per_s": scans["pyarrow_scan_threaded"]["rows_per_s"],
        })
    for paired in rounds:
        kiln = paired["kiln_sequential_rows_per_s"]
        paired["sequential_vs_pyarrow_scan"] = kiln / paired["pyarrow_scan_rows_per_s"]
        paired["sequential_vs_pyarrow_threaded_scan"] = kiln / paired["pyarrow_scan_threaded_rows_per_s"]
    return rounds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", type=Path, required=True, help="block_shuffle --json output")
    parser.add_argument("--readers", type=Path, required=True, help="readers.py --json output")
    parser.add_argument("--metrics", type=Path, required=True, help="metrics_av2.py --json output")
    parser.add_argument("--scan-rounds", nargs="*", default=[],
                        help="kiln sequential and pyarrow scan JSON files, in pairs, one per round")
    parser.add_argument("--json", type=Path, help="write the combined figures here")
    args = parser.parse_args()
    kiln = json.loads(args.kiln.read_text())
    readers = json.loads(args.readers.read_text())
    metrics = json.loads(args.metrics.read_text())

    figures = {
        "files": readers["files"],
        "rows": readers["rows"],
        "batch_size": readers["batch_size"],
        "workers": readers["workers"],
        "ideal_distinct": kiln["ideal_distinct_files_per_batch"],
        "kiln_block_shuffle_rows_per_s": kiln["block_shuffle_rows_per_s"],
        "kiln_block_shuffle_distinct": kiln["block_shuffle_distinct_files_per_batch"],
        "kiln_sequential_rows_per_s": kiln["sequential_rows_per_s"],
        "kiln_sequential_distinct": kiln["sequential_distinct_files_per_batch"],
        "kiln_collate": kiln["collate"],
        "pyarrow_scan_rows_per_s": readers["pyarrow_scan"]["rows_per_s"],
        "pyarrow_scan_threaded_rows_per_s": readers["pyarrow_scan_threaded"]["rows_per_s"],
        "torch_random_rows_per_s": readers["torch_random"]["rows_per_s"],
        "torch_random_distinct": readers["torch_random"]["distinct_files_per_batch"],
        "torch_sequential_rows_per_s": readers["torch_sequential"]["rows_per_s"],
        "torch_sequential_distinct": readers["torch_sequential"]["distinct_files_per_batch"],
        "torch_shuffle_buffer_rows_per_s": readers["torch_shuffle_buffer"]["rows_per_s"],
        "torch_shuffle_buffer_distinct": readers["torch_shuffle_buffer"]["distinct_files_per_batch"],
        "kiln_metrics_agents_per_s": metrics["kiln_host_one_thread_agents_per_s"],
        "av2_agents_per_s": metrics.get("av2_agents_per_s"),
        "numpy_agents_per_s": metrics["numpy_agents_per_s"],
        "kiln_vs_av2_max_relative_difference": metrics.get("kiln_vs_av2_max_relative_difference"),
    }
    f = figures
    ratios = {
        # The example's own figure: the median over rounds of each round's paired ratio.
        "block_shuffle_vs_sequential": kiln["block_shuffle_vs_sequential"],
        "block_shuffle_vs_torch_random": f["kiln_block_shuffle_rows_per_s"] / f["torch_random_rows_per_s"],
        "block_shuffle_vs_torch_shuffle_buffer": f["kiln_block_shuffle_rows_per_s"] / f["torch_shuffle_buffer_rows_per_s"],
        "block_shuffle_distinct_vs_shuffle_buffer": f["kiln_block_shuffle_distinct"] / f["torch_shuffle_buffer_distinct"],
        "sequential_vs_pyarrow_scan": f["kiln_sequential_rows_per_s"] / f["pyarrow_scan_rows_per_s"],
        # The same resources on both sides: kiln's workers against pyarrow's thread pool.
        "sequential_vs_pyarrow_threaded_scan": f["kiln_sequential_rows_per_s"] / f["pyarrow_scan_threaded_rows_per_s"],
        "sequential_vs_torch_sequential": f["kiln_sequential_rows_per_s"] / f["torch_sequential_rows_per_s"],
        "metrics_vs_av2": (f["kiln_metrics_agents_per_s"] / f["av2_agents_per_s"]) if f["av2_agents_per_s"] else None,
        "metrics_vs_numpy": f["kiln_metrics_agents_per_s"] / f["numpy_agents_per_s"],
    }
    rounds = scan_rounds(args.scan_rounds)
    if rounds:
        figures["scan_rounds"] = rounds
        for key in ("sequential_vs_pyarrow_scan", "sequential_vs_pyarrow_threaded_scan"):
            ratios[key] = statistics.median(paired[key] for paired in rounds)
    figures.update(ratios)
    difference = f["kiln_vs_av2_max_relative_difference"]
    targets = {
        "block_shuffle >= 0.9x kiln sequential": ratios["block_shuffle_vs_sequential"] >= 0.9,
        "block_shuffle >= 100x torch RandomSampler": ratios["block_shuffle_vs_torch_random"] >= 100,
        "block_shuffle >= 10x torch shuffle buffer": ratios["block_shuffle_vs_torch_shuffle_buffer"] >= 10,
        "block_shuffle >= 2x the shuffle buffer's distinct files per batch": ratios["block_shuffle_distinct_vs_shuffle_buffer"] >= 2,
        # kiln with its workers, pyarrow on one thread (the target's terms); the threaded ratio
        # is printed beside it.
        "sequential >= 2x pyarrow scan (1 thread)": ratios["sequential_vs_pyarrow_scan"] >= 2,
        "metrics >= 3x av2 on one core": ratios["metrics_vs_av2"] is not None and ratios["metrics_vs_av2"] >= 3,
        "metrics agree with av2 to 1e-6": difference is not None and difference <= 1e-6,
    }
    figures["targets"] = targets

    print(f"\nkiln against its peers: {f['files']} files, {f['rows']} rows, batch {f['batch_size']}, "
          f"{f['workers']} workers, {f['kiln_collate']} collation "
          f"(ideal distinct files per batch {f['ideal_distinct']:.1f})")
    print(f"{'reader':<52}{'rows/s':>14}{'files/batch':>13}")
    rows = [
        ("kiln block shuffle", f["kiln_block_shuffle_rows_per_s"], f["kiln_block_shuffle_distinct"]),
        ("kiln sequential", f["kiln_sequential_rows_per_s"], f["kiln_sequential_distinct"]),
        ("pyarrow scan, 1 thread, no batching", f["pyarrow_scan_rows_per_s"], None),
        ("pyarrow scan, its thread pool, no batching", f["pyarrow_scan_threaded_rows_per_s"], None),
        ("torch DataLoader + RandomSampler (map-style, LRU)", f["torch_random_rows_per_s"], f["torch_random_distinct"]),
        ("torch DataLoader, sequential (map-style)", f["torch_sequential_rows_per_s"], f["torch_sequential_distinct"]),
        ("torch DataLoader, IterableDataset + shuffle buffer", f["torch_shuffle_buffer_rows_per_s"], f["torch_shuffle_buffer_distinct"]),
    ]
    for label, rate, distinct in rows:
        shown = "-" if distinct is None else f"{distinct:.1f}"
        print(f"{label:<52}{rate:14.0f}{shown:>13}")
    if rounds:
        print(f"\n{'kiln sequential against pyarrow, alternating rounds':<52}{'rows/s':>14}{'ratio':>13}")
        for number, paired in enumerate(rounds, start=1):
            print(f"{f'round {number}: kiln sequential':<52}{paired['kiln_sequential_rows_per_s']:14.0f}")
            print(f"{f'round {number}: pyarrow scan, 1 thread':<52}{paired['pyarrow_scan_rows_per_s']:14.0f}"
                  f"{paired['sequential_vs_pyarrow_scan']:12.2f}x")
            print(f"{f'round {number}: pyarrow scan, its thread pool':<52}"
                  f"{paired['pyarrow_scan_threaded_rows_per_s']:14.0f}"
                  f"{paired['sequential_vs_pyarrow_threaded_scan']:12.2f}x")
        print("(the ratios below to pyarrow are the medians of these rounds)")
    av2_rate = f["av2_agents_per_s"]
    print(f"\n{'metrics (Argoverse 2, one core)':<52}{'agents/s':>14}")
    print(f"{'kiln-ml-metrics host path':<52}{f['kiln_metrics_agents_per_s']:14.0f}")
    print(f"{'numpy, vectorized':<52}{f['numpy_agents_per_s']:14.0f}")
    if av2_rate:
        print(f"{'av2 functions':<52}{av2_rate:14.0f}")
    if difference is not None:
        print(f"kiln vs av2 on the same agents: max relative difference {difference:.2e}")
    print("\ntargets:")
    for name, met in targets.items():
        print(f"  [{'met' if met else 'NOT MET'}] {name}")
    for name, value in ratios.items():
        if value is not None:
            print(f"  {name}: {value:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
