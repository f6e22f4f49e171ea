"""kiln-metrics against av2 and a vectorized numpy reference, on the same data.

Reads the data that `metrics_throughput --dump DIR` wrote, computes the Argoverse 2 single-agent
metrics (min-FDE mode, miss when minFDE > 2 m, brier-minFDE with the probabilities as given) two
ways, checks them against kiln's JSON and prints the side-by-side throughput:

- `av2`: the package's per-actor functions (`compute_ade`, `compute_fde`,
  `compute_is_missed_prediction`, `compute_brier_fde`) in a loop over actors, the way its
  evaluation code uses them;
- numpy: the same definitions vectorized over all actors at once (float32, like kiln's input).

Thread counts are pinned to 1 by the calling script (OMP_NUM_THREADS etc.).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

MISS_THRESHOLD_M = 2.0
LOW_PROBABILITY_FLOOR = 0.05


def load(directory: Path):
    meta = json.loads((directory / "meta.json").read_text())
    arrays = {}
    for name in ("predictions", "ground_truth", "probabilities"):
        entry = meta[f"{name}.f32"]
        arrays[name] = np.fromfile(directory / f"{name}.f32", dtype=entry["dtype"]).reshape(entry["shape"])
    return arrays["predictions"], arrays["ground_truth"], arrays["probabilities"]


def by_probability(pred, prob):
    """Modes in descending probability (stable), as av2's `from_parquet` orders submissions.

    The order decides ties: the first (most probable) mode with the smallest FDE is selected.
    """
    order = np.argsort(-prob, axis=1, kind="stable")
    rows = np.arange(pred.shape[0])[:, None]
    return pred[rows, order], prob[rows, order]


def numpy_metrics(pred, gt, prob):
    """The Argoverse 2 convention, vectorized over the N actors."""
    n = pred.shape[0]
    rows = np.arange(n)
    distance = np.linalg.norm(pred - gt[:, None], axis=-1)  # [N, K, T]
    # Reorder only the small [N, K] results by probability, not the predictions.
    order = np.argsort(-prob, axis=1, kind="stable")
    ade = np.take_along_axis(distance.mean(axis=-1), order, axis=1)
    fde = np.take_along_axis(distance[..., -1], order, axis=1)
    prob = np.take_along_axis(prob, order, axis=1)
    best = fde.argmin(axis=1)  # first index on ties
    min_ade, min_fde = ade[rows, best], fde[rows, best]
    p = prob[rows, best].astype(np.float64)
    top = 0  # the most probable mode, after the ordering above
    penalty = -np.log(np.maximum(p, LOW_PROBABILITY_FLOOR))
    return {
        "min_ade": float(min_ade.mean(dtype=np.float64)),
        "min_fde": float(min_fde.mean(dtype=np.float64)),
        "miss_rate": float((min_fde > MISS_THRESHOLD_M).mean()),
        "brier_min_fde": float((min_fde + (1.0 - p) ** 2).mean()),
        "brier_min_ade": float((min_ade + (1.0 - p) ** 2).mean()),
        "p_min_ade": float((min_ade + penalty).mean()),
        "p_min_fde": float((min_fde + penalty).mean()),
        "min_ade_k1": float(ade[rows, top].mean(dtype=np.float64)),
        "min_fde_k1": float(fde[rows, top].mean(dtype=np.float64)),
    }


def av2_metrics(pred, gt, prob, metrics):
    """The av2 package's per-actor functions, selection and mean done as the convention says."""
    n = pred.shape[0]
    pred, prob = by_probability(pred, prob)
    min_ade = np.empty(n)
    min_fde = np.empty(n)
    missed = np.empty(n, dtype=bool)
    brier = np.empty(n)
    for i in range(n):
        ade = metrics.compute_ade(pred[i], gt[i])
        fde = metrics.compute_fde(pred[i], gt[i])
        best = int(np.argmin(fde))
        min_ade[i] = ade[best]
        min_fde[i] = fde[best]
        missed[i] = metrics.compute_is_missed_prediction(pred[i], gt[i], MISS_THRESHOLD_M)[best]
        brier[i] = metrics.compute_brier_fde(pred[i], gt[i], prob[i])[best]
    return {
        "min_ade": float(min_ade.mean()),
        "min_fde": float(min_fde.mean()),
        "miss_rate": float(missed.mean()),
        "brier_min_fde": float(brier.mean()),
    }


def best_of(repeats, function, *args):
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function(*args)
        best = min(best, time.perf_counter() - started)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="directory written by --dump")
    parser.add_argument("--kiln-json", type=Path, required=True, help="JSON written by metrics_throughput")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--av2-agents", type=int, default=20000, help="actors for the (slow) av2 loop")
    parser.add_argument("--json", type=Path, help="write the side-by-side figures here")
    args = parser.parse_args()

    pred, gt, prob = load(args.data)
    kiln = json.loads(args.kiln_json.read_text())
    n = pred.shape[0]
    numpy_seconds, reference = best_of(args.repeats, numpy_metrics, pred, gt, prob)

    try:
        from av2.datasets.motion_forecasting.eval import metrics as av2
    except Exception as error:  # noqa: BLE001 - any import failure means: no av2 here
        av2 = None
        print(f"av2 is NOT available ({error!r}): comparing with the numpy reference only", file=sys.stderr)

    failures = []

    def check(name, expected, actual, tolerance):
        if actual is None or abs(expected - actual) > tolerance * max(1.0, abs(expected)):
            failures.append(f"{name}: kiln {actual} vs reference {expected}")

    for name, value in reference.items():
        # A miss flips only if an FDE lies within float rounding of 2 m: allow a few actors.
        tolerance = 3.0 / n if name == "miss_rate" else 1e-5
        check(name, value, kiln.get(name), tolerance)

    figures = {
        "n": n,
        "k": pred.shape[1],
        "t": pred.shape[2],
        "kiln_host_threads": kiln["host_threads"],
        "kiln_host_one_thread_agents_per_s": kiln["host_one_thread_agents_per_s"],
        "kiln_tensor_agents_per_s": kiln.get("tensor_agents_per_s"),
        "numpy_agents_per_s": n / numpy_seconds,
        "kiln_vs_numpy_one_thread": kiln["host_one_thread_agents_per_s"] / (n / numpy_seconds),
        "numpy": reference,
    }
    rows = [
        ("kiln host, 1 thread", kiln["host_one_thread_agents_per_s"]),
        (f"kiln host, {kiln['host_threads']} threads", kiln["host_agents_per_s"]),
    ]
    if kiln.get("tensor_agents_per_s"):
        rows.append((f"kiln tensor ({kiln['tensor_device']})", kiln["tensor_agents_per_s"]))
    rows.append(("numpy vectorized, 1 thread", n / numpy_seconds))

    if av2 is not None:
        subset = min(args.av2_agents, n)
        av2_seconds, av2_values = best_of(1, av2_metrics, pred[:subset], gt[:subset], prob[:subset], av2)
        subset_reference = numpy_metrics(pred[:subset], gt[:subset], prob[:subset])
        for name, value in av2_values.items():
            tolerance = 3.0 / subset if name == "miss_rate" else 1e-5
            if abs(value - subset_reference[name]) > tolerance * max(1.0, abs(value)):
                failures.append(f"{name}: av2 {value} vs numpy {subset_reference[name]} on {subset} actors")
        figures["av2_agents"] = subset
        figures["av2_agents_per_s"] = subset / av2_seconds
        figures["av2"] = av2_values
        figures["numpy_on_av2_agents"] = subset_reference
        rows.append((f"av2 per-actor loop ({subset} actors)", subset / av2_seconds))
    figures["agreement_failures"] = failures

    print(f"\nArgoverse 2 metrics on N = {n}, K = {pred.shape[1]}, T = {pred.shape[2]} (same data)")
    subset_header = f"first {figures['av2_agents']}: numpy / av2" if "av2_agents" in figures else ""
    print(f"{'metric':<16}{'kiln':>12}{'numpy':>12}    {subset_header}")
    for name in ("min_ade", "min_fde", "miss_rate", "brier_min_fde", "min_ade_k1"):
        av2_value = figures.get("av2", {}).get(name)
        subset = ""
        if av2_value is not None:
            subset = f"{figures['numpy_on_av2_agents'][name]:.6f} / {av2_value:.6f}"
        print(f"{name:<16}{kiln[name]:12.6f}{reference[name]:12.6f}    {subset}")
    baseline = n / numpy_seconds
    print(f"\n{'path':<40}{'agents/s':>14}{'vs numpy':>10}")
    for label, rate in rows:
        print(f"{label:<40}{rate:14.0f}{rate / baseline:9.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if failures:
        print("\nDISAGREEMENT:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("\nall values agree")


if __name__ == "__main__":
    main()
