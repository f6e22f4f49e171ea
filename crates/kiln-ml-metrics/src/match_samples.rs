//! Waymo's mAP samples of one prediction (`ComputeMeanAveragePrecision` in
//! `motion_metrics.cc`): its kept hypotheses by confidence, the first match a true positive.

use crate::confidence_order::cmp_signless;
use crate::config::MetricsConfig;
use crate::mode_errors::{BatchPlan, UnitErrors};
use crate::precision_sums::{MatchOutcome, MatchSample};
use crate::sums::MetricSums;
use crate::trajectory_type::TrajectoryType;

/// The precision bucket of a prediction: the type of highest priority among its agents'
/// (`None` when no agent has one, and Waymo leaves the prediction out).
pub(crate) fn prediction_bucket(types: &[Option<TrajectoryType>]) -> Option<usize> {
    types
        .iter()
        .flatten()
        .copied()
        .max_by_key(|kind| kind.priority())
        .map(TrajectoryType::bucket)
}

/// Adds one prediction's samples at every horizon and K to the precision sums.
///
/// The kept hypotheses (`order[..kept]`) are sorted by descending confidence, equal ones in
/// rank order (Waymo's `std::sort` leaves that order unspecified). A prediction whose match
/// cannot be judged at a horizon (no final step) adds nothing there, as in Waymo's `IsMatch`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_match_samples(
    config: &MetricsConfig,
    plan: &BatchPlan,
    errors: &UnitErrors,
    order: &[usize],
    confidences: &[f32],
    bucket: usize,
    by_confidence: &mut Vec<usize>,
    sums: &mut MetricSums,
) {
    let modes = errors.modes;
    let miss_needs_final = config.miss_needs_final();
    for (h, horizon) in sums.horizons.iter_mut().enumerate() {
        let judged = errors.has_final[h] || (!miss_needs_final && errors.has_path[h]);
        if !judged {
            continue;
        }
        let miss = &errors.miss[h * modes..][..modes];
        for (index, &kept) in plan.kept.iter().enumerate() {
            by_confidence.clear();
            by_confidence.extend_from_slice(&order[..kept]);
            // Stable: equal confidences keep their rank order.
            by_confidence.sort_by(|&a, &b| cmp_signless(confidences[b], confidences[a]));
            let mut matched = false;
            let samples = by_confidence.iter().map(|&mode| {
                let outcome = match (miss[mode], matched) {
                    (true, _) => MatchOutcome::Miss,
                    (false, false) => MatchOutcome::FirstMatch,
                    (false, true) => MatchOutcome::LaterMatch,
                };
                matched |= !miss[mode];
                MatchSample {
                    confidence: confidences[mode],
                    outcome,
                }
            });
            horizon.precision[index].add(bucket, samples);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joint_prediction_takes_its_agents_highest_priority_type() {
        use TrajectoryType::*;
        assert_eq!(prediction_bucket(&[None, None]), None);
        assert_eq!(prediction_bucket(&[Some(Stationary), None]), Some(0));
        assert_eq!(
            prediction_bucket(&[Some(Stationary), Some(Straight)]),
            Some(1)
        );
        // Straight-left outranks straight-right; a right U-turn outranks all, binned as a right turn.
        assert_eq!(
            prediction_bucket(&[Some(StraightLeft), Some(StraightRight)]),
            Some(2)
        );
        assert_eq!(
            prediction_bucket(&[Some(LeftUTurn), Some(RightUTurn)]),
            Some(7)
        );
    }
}
