//! [`PrecisionSums`]: the mergeable state behind Waymo's mAP and soft mAP at one horizon and K.

use serde::{Deserialize, Serialize};

use crate::precision_recall::{PredictionSample, average_precision};
use crate::trajectory_type::TRAJECTORY_TYPES;

/// How one scored hypothesis of a prediction fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MatchOutcome {
    /// The most confident hypothesis that matched: a true positive.
    FirstMatch,
    /// A match after the first: a false positive for mAP, left out of soft mAP.
    LaterMatch,
    /// No match: a false positive.
    Miss,
}

/// One scored hypothesis: its confidence and outcome.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MatchSample {
    /// The hypothesis' confidence as given (Waymo does not normalize it for mAP).
    pub confidence: f32,
    /// Whether it was the first match, a later match or a miss.
    pub outcome: MatchOutcome,
}

/// The samples and measured predictions of one trajectory-type bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrecisionBucket {
    /// Every scored hypothesis, in arrival order (the curve sorts them).
    pub samples: Vec<MatchSample>,
    /// Predictions measured (the possible true positives).
    pub predictions: u64,
}

/// Waymo's `MeanAveragePrecisionStats`: per trajectory-type bucket, every scored hypothesis.
///
/// Unlike the other metrics this state grows with the data (K samples per prediction), since
/// the precision/recall curve needs every sample's rank; merging appends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrecisionSums {
    /// One bucket per [`TrajectoryType`](crate::TrajectoryType) discriminant; empty until the
    /// first prediction with a trajectory type.
    pub buckets: Vec<PrecisionBucket>,
}

impl PrecisionSums {
    /// Adds one prediction's samples to `bucket`.
    pub(crate) fn add(&mut self, bucket: usize, samples: impl IntoIterator<Item = MatchSample>) {
        if self.buckets.len() < TRAJECTORY_TYPES {
            self.buckets
                .resize(TRAJECTORY_TYPES, PrecisionBucket::default());
        }
        let target = &mut self.buckets[bucket];
        target.samples.extend(samples);
        target.predictions += 1;
    }

    /// Appends another state's samples.
    pub fn merge(&mut self, other: &PrecisionSums) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets
                .resize(other.buckets.len(), PrecisionBucket::default());
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            mine.samples.extend_from_slice(&theirs.samples);
            mine.predictions += theirs.predictions;
        }
    }

    /// The average precision of one bucket (`None` when it has no samples); `soft` leaves later
    /// matches out instead of counting them as false positives.
    pub fn bucket_average_precision(&self, bucket: usize, soft: bool) -> Option<f64> {
        let bucket = self.buckets.get(bucket)?;
        let mut samples: Vec<PredictionSample> = bucket
            .samples
            .iter()
            .filter(|sample| !(soft && sample.outcome == MatchOutcome::LaterMatch))
            .map(|sample| PredictionSample {
                confidence: sample.confidence,
                true_positive: sample.outcome == MatchOutcome::FirstMatch,
            })
            .collect();
        if samples.is_empty() {
            return None;
        }
        Some(average_precision(&mut samples, bucket.predictions as usize))
    }

    /// Waymo's `ComputeMapMetric`: the mean over buckets with samples of their average
    /// precision; `None` when no bucket has any (Waymo reports 0 there).
    pub fn mean_average_precision(&self, soft: bool) -> Option<f64> {
        let values: Vec<f64> = (0..self.buckets.len())
            .filter_map(|bucket| self.bucket_average_precision(bucket, soft))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(confidence: f32, outcome: MatchOutcome) -> MatchSample {
        MatchSample {
            confidence,
            outcome,
        }
    }

    #[test]
    fn later_matches_are_false_positives_for_map_and_dropped_for_soft_map() {
        let mut sums = PrecisionSums::default();
        assert_eq!(sums.mean_average_precision(false), None);
        // The confident hypothesis misses, the next two match: one true positive.
        sums.add(
            1,
            [
                sample(0.8, MatchOutcome::Miss),
                sample(0.5, MatchOutcome::FirstMatch),
                sample(0.3, MatchOutcome::LaterMatch),
            ],
        );
        // Curve (1, 0), (1, 1/2), (1, 1/3): mAP 1/2; soft mAP drops the third sample: 1/2.
        assert_eq!(sums.mean_average_precision(false), Some(0.5));
        assert_eq!(sums.mean_average_precision(true), Some(0.5));
        let mut other = PrecisionSums::default();
        other.add(0, [sample(0.9, MatchOutcome::FirstMatch)]);
        sums.merge(&other);
        // Two non-empty buckets: (1/2 + 1) / 2.
        assert_eq!(sums.mean_average_precision(false), Some(0.75));
        assert_eq!(sums.buckets[1].predictions, 1);
    }

    #[test]
    fn a_later_match_before_a_true_positive_lowers_map_but_not_soft_map() {
        // Above, the later match comes after the last true positive, where a false positive
        // changes nothing; here a second prediction's true positive ranks below it.
        let mut sums = PrecisionSums::default();
        sums.add(
            1,
            [
                sample(0.8, MatchOutcome::Miss),
                sample(0.5, MatchOutcome::FirstMatch),
                sample(0.3, MatchOutcome::LaterMatch),
            ],
        );
        sums.add(1, [sample(0.2, MatchOutcome::FirstMatch)]);
        // mAP, ranked F T F T of 2: curve (0, 0), (1/2, 1/2), (1/2, 1/3), (1, 1/2); the
        // interpolated area is 1 × 1/2.
        assert_eq!(sums.mean_average_precision(false), Some(0.5));
        // Soft mAP, the later match left out, F T T: (0, 0), (1/2, 1/2), (1, 2/3): 2/3.
        let soft = sums.mean_average_precision(true).unwrap();
        assert!((soft - 2.0 / 3.0).abs() < 1e-6, "{soft}");
    }
}
