//! Waymo's precision/recall curve and average precision (`ComputePrCurve`,
//! `ComputeMeanAveragePrecision` in `motion_metrics.cc`), the building blocks of its mAP.
//!
//! [`TrajectoryMetrics`](crate::TrajectoryMetrics) assigns the true positives and reports mAP
//! itself when a batch carries trajectory types; these functions give Waymo's numbers for any
//! (confidence, true positive) samples of one bucket.

/// One scored hypothesis: its confidence and whether it was a true positive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictionSample {
    /// The hypothesis' confidence.
    pub confidence: f32,
    /// Whether it matched an object not matched by a more confident hypothesis.
    pub true_positive: bool,
}

/// One point of a precision/recall curve (computed in `f32`, as Waymo's `PrSample`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrPoint {
    /// True positives so far over the number of ground-truth objects.
    pub recall: f64,
    /// True positives so far over the samples so far.
    pub precision: f64,
}

/// Sorts by descending confidence, false positives first among equal confidences (Waymo's
/// `SortSamples`), then returns one curve point per sample.
///
/// ```
/// use kiln_ml_metrics::precision_recall::{PredictionSample, precision_recall_curve};
///
/// let mut samples = [(0.3, true), (0.8, true), (0.5, false)]
///     .map(|(confidence, true_positive)| PredictionSample { confidence, true_positive });
/// let curve = precision_recall_curve(&mut samples, 4);
/// assert_eq!((curve[0].recall, curve[0].precision), (0.25, 1.0));
/// // In `float`, as Waymo computes it.
/// assert_eq!((curve[2].recall, curve[2].precision), (0.5, f64::from(2.0f32 / 3.0)));
/// ```
pub fn precision_recall_curve(
    samples: &mut [PredictionSample],
    ground_truth_count: usize,
) -> Vec<PrPoint> {
    samples.sort_by(|a, b| {
        crate::confidence_order::cmp_signless(b.confidence, a.confidence)
            .then(a.true_positive.cmp(&b.true_positive))
    });
    let mut true_positives = 0usize;
    samples
        .iter()
        .enumerate()
        .map(|(index, sample)| {
            true_positives += usize::from(sample.true_positive);
            // In `float`, as Waymo's `PrSample`.
            let positives = true_positives as f32;
            PrPoint {
                recall: f64::from(positives / ground_truth_count as f32),
                precision: f64::from(positives / (index + 1) as f32),
            }
        })
        .collect()
}

/// The area under Waymo's interpolated curve: scanning from the highest recall down, each
/// precision rise closes a rectangle; 0 for no samples.
pub fn average_precision(samples: &mut [PredictionSample], ground_truth_count: usize) -> f64 {
    let curve = precision_recall_curve(samples, ground_truth_count);
    let Some(&last) = curve.last() else {
        return 0.0;
    };
    // Waymo multiplies its `float` points in `float` and adds the areas in `double`.
    let product = |a: f64, b: f64| f64::from(a as f32 * b as f32);
    let mut highest = last;
    let mut area = 0.0;
    for point in curve.iter().rev() {
        if point.precision > highest.precision {
            area += product(
                highest.precision,
                f64::from(highest.recall as f32 - point.recall as f32),
            );
            highest = *point;
        }
    }
    area + product(highest.recall, highest.precision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(pairs: &[(f32, bool)]) -> Vec<PredictionSample> {
        pairs
            .iter()
            .map(|&(confidence, true_positive)| PredictionSample {
                confidence,
                true_positive,
            })
            .collect()
    }

    fn assert_curve(curve: &[PrPoint], expected: &[(f64, f64)]) {
        assert_eq!(curve.len(), expected.len());
        for (point, &(recall, precision)) in curve.iter().zip(expected) {
            assert!((point.recall - recall).abs() < 1e-5, "{curve:?}");
            assert!((point.precision - precision).abs() < 1e-5, "{curve:?}");
        }
    }

    /// Waymo `motion_metrics_test.cc`, `ComputePrCurve`.
    #[test]
    fn waymo_compute_pr_curve() {
        let mut s = samples(&[
            (0.3, true),
            (0.7, false),
            (0.4, true),
            (0.8, true),
            (0.5, false),
            (0.2, true),
        ]);
        let expected = [
            (1.0 / 6.0, 1.0),
            (1.0 / 6.0, 0.5),
            (1.0 / 6.0, 1.0 / 3.0),
            (1.0 / 3.0, 0.5),
            (0.5, 0.6),
            (2.0 / 3.0, 2.0 / 3.0),
        ];
        assert_curve(&precision_recall_curve(&mut s, 6), &expected);
    }

    /// Waymo `motion_metrics_test.cc`, `ComputePrCurveEqualConfidences`: false positives first.
    #[test]
    fn waymo_compute_pr_curve_equal_confidences() {
        let mut s = samples(&[
            (0.8, true),
            (0.5, false),
            (0.5, true),
            (0.5, true),
            (0.5, false),
            (0.5, false),
        ]);
        let expected = [
            (1.0 / 6.0, 1.0),
            (1.0 / 6.0, 0.5),
            (1.0 / 6.0, 1.0 / 3.0),
            (1.0 / 6.0, 0.25),
            (1.0 / 3.0, 0.4),
            (0.5, 0.5),
        ];
        assert_curve(&precision_recall_curve(&mut s, 6), &expected);
    }

    /// Waymo `motion_metrics_test.cc`, `ComputeMeanAveragePrecision`.
    #[test]
    fn waymo_compute_mean_average_precision() {
        let mut s = samples(&[
            (0.3, true),
            (0.7, true),
            (0.4, false),
            (0.8, true),
            (0.5, false),
            (0.2, false),
        ]);
        assert!((average_precision(&mut s, 4) - 0.65).abs() < 1e-4);
        let mut equal = samples(&[
            (0.8, true),
            (0.5, false),
            (0.5, true),
            (0.5, true),
            (0.5, false),
            (0.5, false),
        ]);
        assert!((average_precision(&mut equal, 6) - 1.0 / 3.0).abs() < 1e-4);
        assert_eq!(average_precision(&mut [], 3), 0.0);
    }
}
