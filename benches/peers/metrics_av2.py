"""kiln-ml-metrics against av2 and a vectorized numpy reference, on the same data.

Reads the data that `metrics_throughput --dump DIR` wrote, computes the Argoverse 2 metrics
(min-FDE mode, miss when minFDE > 2 m, brier-minFDE with the probabilities as given) two ways,
checks them against kiln's JSON and prints the side-by-side throughput:

- `av2`: the package's per-actor functions (`compute_ade`, `compute_fde`,
  `compute_is_missed_prediction`, `compute_brier_fde`) in a loop over actors, the way its
  evaluation code uses them; for joint predictions (`--joint A`) its world functions
  (`compute_world_ade`, `compute_world_fde`, `compute_world_misses`, `compute_world_brier_fde`)
  in a loop over scenes, read at the world with the lowest mean FDE (the actor miss rate);
- numpy: the same definitions vectorized over all actors at once (float32, like kiln's input),
  plus Waymo's mAP and soft mAP when the data has trajectory types (`--trajectory-types`).

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


# Waymo's `TrajectoryType` codes: priority for joint predictions (`GetTrajectoryTypePriority`)
# and the bucket each is scored in (right U-turns with right turns).
TYPE_PRIORITY = np.array([0, 1, 3, 2, 6, 5, 7, 4])
TYPE_BUCKET = np.array([0, 1, 2, 3, 4, 5, 7, 7])


def load(directory: Path):
    meta = json.loads((directory / "meta.json").read_text())
    arrays = {}
    for name in ("predictions", "ground_truth", "probabilities", "trajectory_types"):
        entry = meta.get(f"{name}.f32")
        if entry is not None:
            arrays[name] = np.fromfile(directory / f"{name}.f32", dtype=entry["dtype"]).reshape(entry["shape"])
    types = arrays.get("trajectory_types")
    if types is not None:
        types = types.astype(np.int64)
    joint = int(meta.get("agents_per_prediction", 1))
    return arrays["predictions"], arrays["ground_truth"], arrays["probabilities"], joint, types


def by_probability(pred, prob):
    """Modes in descending probability (stable), as av2's `from_parquet` orders submissions.

    The order decides ties: the first (most probable) mode with the smallest FDE is selected.
    """
    order = np.argsort(-prob, axis=1, kind="stable")
    rows = np.arange(pred.shape[0])[:, None]
    return pred[rows, order], prob[rows, order]


def average_precision(confidence, true_positive, predictions):
    """Waymo's `ComputeMeanAveragePrecision` for one bucket, in its float32 arithmetic."""
    order = np.lexsort((true_positive, -confidence))  # by confidence, false positives first
    hits = np.cumsum(true_positive[order]).astype(np.float32)
    precision = hits / np.arange(1, len(hits) + 1, dtype=np.float32)
    recall = hits / np.float32(predictions)
    # From the highest recall down, each strict rise in precision closes a rectangle.
    precision, recall = precision[::-1], recall[::-1]
    previous_max = np.concatenate(([-np.inf], np.maximum.accumulate(precision)[:-1]))
    record = precision > previous_max
    p, r = precision[record], recall[record]
    areas = (p[:-1] * (r[:-1] - r[1:])).astype(np.float64)
    return float(areas.sum() + np.float64(r[-1] * p[-1]))


def mean_average_precision(prob_sorted, hit_sorted, buckets, soft):
    """Waymo's mAP over trajectory-type buckets; rows hold each prediction's hypotheses in
    descending confidence. The first hit of a row is its true positive."""
    first = hit_sorted & (np.cumsum(hit_sorted, axis=1) == 1)
    later = hit_sorted & ~first
    values = []
    for bucket in range(8):
        rows = buckets == bucket
        if not rows.any():
            continue
        keep = ~later[rows] if soft else np.ones_like(later[rows])
        confidence = prob_sorted[rows][keep]
        if confidence.size == 0:
            continue
        values.append(average_precision(confidence, first[rows][keep], int(rows.sum())))
    return float(np.mean(values)) if values else None


def numpy_metrics(pred, gt, prob, joint=1, types=None):
    """The Argoverse 2 convention, vectorized over the actors (or scenes of `joint` actors)."""
    scenes = pred.shape[0] // joint
    k = pred.shape[1]
    rows = np.arange(scenes)
    distance = np.linalg.norm(pred - gt[:, None], axis=-1)  # [N, K, T]
    # Reorder only the small [N, K] results by probability, not the predictions.
    order = np.argsort(-prob, axis=1, kind="stable")
    actor_fde = distance[..., -1].reshape(scenes, joint, k)
    actor_fde = np.take_along_axis(actor_fde, order[:, None, :], axis=2)
    ade = np.take_along_axis(distance.mean(axis=-1).reshape(scenes, joint, k).mean(axis=1), order, axis=1)
    fde = actor_fde.mean(axis=1)
    prob = np.take_along_axis(prob, order, axis=1)
    best = fde.argmin(axis=1)  # first index on ties
    min_ade, min_fde = ade[rows, best], fde[rows, best]
    actor_missed = actor_fde > MISS_THRESHOLD_M  # [S, A, K]
    p = prob[rows, best].astype(np.float64)
    top = 0  # the most probable mode, after the ordering above
    penalty = -np.log(np.maximum(p, LOW_PROBABILITY_FLOOR))
    values = {
        "min_ade": float(min_ade.mean(dtype=np.float64)),
        "min_fde": float(min_fde.mean(dtype=np.float64)),
        "miss_rate": float(actor_missed[rows, :, best].any(axis=1).mean()),
        "brier_min_fde": float((min_fde + (1.0 - p) ** 2).mean()),
        "brier_min_ade": float((min_ade + (1.0 - p) ** 2).mean()),
        "p_min_ade": float((min_ade + penalty).mean()),
        "p_min_fde": float((min_fde + penalty).mean()),
        "min_ade_k1": float(ade[rows, top].mean(dtype=np.float64)),
        "min_fde_k1": float(fde[rows, top].mean(dtype=np.float64)),
    }
    if joint > 1:
        values["actor_miss_rate"] = float(actor_missed[rows, :, best].mean())
    if types is not None:
        # The bucket of a scene: its agents' type of highest priority (-1: none).
        priority = np.where(types >= 0, TYPE_PRIORITY[np.maximum(types, 0)], -1).reshape(scenes, joint)
        winner = np.take_along_axis(types.reshape(scenes, joint), priority.argmax(axis=1)[:, None], axis=1)[:, 0]
        buckets = np.where(priority.max(axis=1) >= 0, TYPE_BUCKET[np.maximum(winner, 0)], -1)
        hit = ~actor_missed.any(axis=1)  # [S, K], in probability order already
        values["mean_average_precision"] = mean_average_precision(prob, hit, buckets, soft=False)
        values["soft_mean_average_precision"] = mean_average_precision(prob, hit, buckets, soft=True)
        values["mean_average_precision_k1"] = mean_average_precision(prob[:, :1], hit[:, :1], buckets, soft=False)
    return values


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


def av2_world_metrics(pred, gt, prob, joint, metrics):
    """av2's world functions per scene, read at the world with the lowest mean FDE."""
    scenes = pred.shape[0] // joint
    order = np.argsort(-prob, axis=1, kind="stable")
    min_ade, min_fde, brier = np.empty(scenes), np.empty(scenes), np.empty(scenes)
    actor_misses, scene_missed = 0, np.empty(scenes, dtype=bool)
    for s in range(scenes):
        world = pred[s * joint:(s + 1) * joint][:, order[s]]
        truth = gt[s * joint:(s + 1) * joint]
        fde = metrics.compute_world_fde(world, truth)
        best = int(np.argmin(fde))
        min_fde[s] = fde[best]
        min_ade[s] = metrics.compute_world_ade(world, truth)[best]
        brier[s] = metrics.compute_world_brier_fde(world, truth, prob[s, order[s]])[best]
        missed = metrics.compute_world_misses(world, truth, MISS_THRESHOLD_M)[:, best]
        actor_misses += int(missed.sum())
        scene_missed[s] = missed.any()
    return {
        "min_ade": float(min_ade.mean()),
        "min_fde": float(min_fde.mean()),
        "miss_rate": float(scene_missed.mean()),
        "brier_min_fde": float(brier.mean()),
        "actor_miss_rate": actor_misses / (scenes * joint),
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

    pred, gt, prob, joint, types = load(args.data)
    kiln = json.loads(args.kiln_json.read_text())
    n = pred.shape[0]
    scenes = n // joint
    numpy_seconds, reference = best_of(args.repeats, numpy_metrics, pred, gt, prob, joint, types)

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
        tolerance = 3.0 / scenes if "miss_rate" in name or "average_precision" in name else 1e-5
        check(name, value, kiln.get(name), tolerance)

    # Exact agreement, not just within the check's tolerance: the largest absolute difference.
    shared = [name for name in reference if kiln.get(name) is not None]
    figures_difference = max(abs(kiln[name] - reference[name]) for name in shared)
    figures = {
        "n": n,
        "agents_per_prediction": joint,
        "kiln_vs_numpy_max_abs_difference": figures_difference,
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
        subset = min(args.av2_agents, n) // joint * joint
        part = (pred[:subset], gt[:subset], prob[: subset // joint])
        if joint > 1:
            av2_seconds, av2_values = best_of(1, av2_world_metrics, *part, joint, av2)
        else:
            av2_seconds, av2_values = best_of(1, av2_metrics, *part, av2)
        subset_reference = numpy_metrics(*part, joint)
        for name, value in av2_values.items():
            tolerance = 3.0 / subset if "miss_rate" in name else 1e-5
            if abs(value - subset_reference[name]) > tolerance * max(1.0, abs(value)):
                failures.append(f"{name}: av2 {value} vs numpy {subset_reference[name]} on {subset} actors")
        figures["av2_agents"] = subset
        figures["av2_agents_per_s"] = subset / av2_seconds
        figures["kiln_vs_av2_one_thread"] = kiln["host_one_thread_agents_per_s"] / (subset / av2_seconds)
        if subset == n:
            # The same agents on both sides: kiln's values against av2's own, relative.
            figures["kiln_vs_av2_max_relative_difference"] = max(
                abs(kiln[name] - value) / max(abs(value), 1e-12) for name, value in av2_values.items()
            )
        figures["av2"] = av2_values
        figures["numpy_on_av2_agents"] = subset_reference
        loop = "per-scene world loop" if joint > 1 else "per-actor loop"
        rows.append((f"av2 {loop} ({subset} actors)", subset / av2_seconds))
    figures["agreement_failures"] = failures

    print(f"\nArgoverse 2 metrics on N = {n}, K = {pred.shape[1]}, T = {pred.shape[2]} (same data)")
    subset_header = f"first {figures['av2_agents']}: numpy / av2" if "av2_agents" in figures else ""
    print(f"{'metric':<28}{'kiln':>12}{'numpy':>12}    {subset_header}")
    names = ["min_ade", "min_fde", "miss_rate", "brier_min_fde", "min_ade_k1"]
    names += [name for name in ("actor_miss_rate", "mean_average_precision", "soft_mean_average_precision") if name in reference]
    for name in names:
        av2_value = figures.get("av2", {}).get(name)
        subset = ""
        if av2_value is not None:
            subset = f"{figures['numpy_on_av2_agents'][name]:.6f} / {av2_value:.6f}"
        print(f"{name:<28}{kiln[name]:12.6f}{reference[name]:12.6f}    {subset}")
    baseline = n / numpy_seconds
    print(f"largest |kiln - numpy| over those metrics: {figures_difference:.3g}")
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
