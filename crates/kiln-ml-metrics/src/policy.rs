//! The choices on which the benchmarks disagree, one type each.
//!
//! See `docs/metrics.md` and the presets on [`MetricsConfig`](crate::MetricsConfig) for which
//! benchmark makes which choice.

use serde::{Deserialize, Serialize};

/// Which hypothesis minADE is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ModeSelection {
    /// The mode with the smallest FDE (first in ranking order on ties) gives minFDE **and**
    /// minADE, and decides the miss (Argoverse 1 evaluator, Argoverse 2 leaderboard convention,
    /// QCNet's default).
    MinFde,
    /// minADE and minFDE are minimized independently and may come from different modes; an
    /// agent misses when every kept mode misses (nuScenes, Waymo).
    Independent,
}

/// How the K kept hypotheses are chosen among the ones submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Pruning {
    /// The first K in submission order; probabilities are not used for ranking (Waymo).
    FirstK,
    /// The K most probable, by a descending sort with the given order among equal
    /// probabilities; without probabilities, the first K (Argoverse 1, nuScenes).
    ByProbability {
        /// Order of modes with equal probability.
        ties: TieOrder,
    },
}

/// Order of modes with equal probability in [`Pruning::ByProbability`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TieOrder {
    /// Lower index first: a stable sort (Argoverse 1).
    LowerIndexFirst,
    /// Higher index first: numpy's reversed ascending argsort, as in nuScenes, wherever
    /// numpy's order is defined by its scalar code: an insertion sort (stable) for up to 16
    /// modes. numpy's order among equal probabilities is its implementation's: with 17 or more
    /// modes its introsort partitions first, and numpy 1.25+ on AVX-512 CPUs sorts with SIMD
    /// networks; neither is stable, and kiln does not reproduce them.
    HigherIndexFirst,
}

/// When a hypothesis (and then an agent) counts as a miss: the selected mode's under
/// [`ModeSelection::MinFde`] (except the max distance's), every kept mode's otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MissRule {
    /// FDE > threshold; exactly the threshold is a hit (Argoverse 1 and 2, QCNet `'FDE'`).
    FinalDistance {
        /// The threshold in meters (2.0 in both Argoverse challenges).
        threshold_m: f64,
    },
    /// The largest displacement over the (valid) steps of the horizon reaches the threshold
    /// (nuScenes: `>=`) or exceeds it (QCNet `'MAXDE'`: `>`).
    MaxDistance {
        /// The threshold in meters (2.0 in nuScenes).
        threshold_m: f64,
        /// Whether a distance equal to the threshold is a miss (`>=`, nuScenes) or a hit (`>`).
        inclusive: bool,
    },
    /// Waymo's box: the final displacement rotated into the ground-truth heading misses when
    /// |lateral| / scale > lateral threshold or |longitudinal| / scale > longitudinal threshold,
    /// with the thresholds of each [`Horizon`](crate::Horizon) and the scale from the agent's
    /// current speed. Needs the batch's `velocity` and `heading`.
    LateralLongitudinal {
        /// How the current speed scales the thresholds.
        speed_scaling: SpeedScaling,
    },
}

/// Waymo's speed scaling of the miss thresholds (`SpeedScaleFactor` in `motion_metrics.cc`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeedScaling {
    /// Below this speed (m/s) the scale is `lower_scale` (Waymo: 1.4).
    pub lower_speed_mps: f64,
    /// Above this speed (m/s) the scale is `upper_scale` (Waymo: 11.0).
    pub upper_speed_mps: f64,
    /// Scale at low speed (Waymo: 0.5).
    pub lower_scale: f64,
    /// Scale at high speed (Waymo: 1.0).
    pub upper_scale: f64,
}

impl SpeedScaling {
    /// Waymo's challenge values: 1.4 m/s and 11 m/s, scales 0.5 and 1.0, as the `float`s of
    /// its config (`1.4f`, slightly below 1.4), so that a speed at the bound scales as there.
    pub fn waymo() -> Self {
        Self {
            lower_speed_mps: waymo_float(1.4),
            upper_speed_mps: 11.0,
            lower_scale: 0.5,
            upper_scale: 1.0,
        }
    }

    /// No scaling: the thresholds apply as written at every speed.
    pub fn none() -> Self {
        Self {
            lower_speed_mps: 1.4,
            upper_speed_mps: 11.0,
            lower_scale: 1.0,
            upper_scale: 1.0,
        }
    }

    /// The factor for a speed in m/s: constant outside the bounds, linear between them.
    pub fn scale(&self, speed_mps: f64) -> f64 {
        if speed_mps < self.lower_speed_mps {
            self.lower_scale
        } else if speed_mps > self.upper_speed_mps {
            self.upper_scale
        } else {
            let fraction =
                (speed_mps - self.lower_speed_mps) / (self.upper_speed_mps - self.lower_speed_mps);
            self.lower_scale + (self.upper_scale - self.lower_scale) * fraction
        }
    }
}

/// A value of Waymo's `MotionMetricsConfig`, a proto `float`, as its C++ code compares it with
/// `double`s: `1.8` there is `1.7999999523...`, not `1.8`.
pub(crate) fn waymo_float(value: f32) -> f64 {
    f64::from(value)
}

/// Which step FDE (and the final-step miss tests) is measured at when a validity mask is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FinalStep {
    /// The last valid step within the horizon (QCNet); an agent with no valid step is skipped.
    LastValid,
    /// The horizon's last step only; an agent whose ground truth is invalid there has no FDE,
    /// minFDE or miss value, though it may still have an ADE (Waymo). Under
    /// [`MissRule::MaxDistance`] a miss needs only a valid step, so such an agent still has one.
    AtHorizon,
}

/// How mode probabilities are checked and used.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbabilityPolicy {
    /// What values are accepted.
    pub check: ProbabilityCheck,
    /// Whether the probability of the selected mode is divided by the sum over the kept modes
    /// (Argoverse 1, QCNet) or used as given (av2's `normalize=False`).
    pub renormalize: bool,
    /// The floor of the p-minADE/p-minFDE penalty: `-ln(max(p, floor))` (Argoverse 1: 0.05).
    pub low_probability_floor: f64,
    /// Under `renormalize`, what a prediction whose kept modes have no mass at all gets
    /// (absent from older saved configurations: [`ZeroMass::Refuse`]).
    #[serde(default)]
    pub zero_mass: ZeroMass,
}

/// What renormalizing does with a prediction whose kept modes' probabilities are all 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ZeroMass {
    /// A row that sums to 0 is refused ([`Error::ProbabilitiesSumToZero`](crate::Error)); kept
    /// modes with no mass while others have some get probability 0 (the limit), not 0/0.
    #[default]
    Refuse,
    /// The kept modes share the mass equally, 1/K each, as if their confidences were equal
    /// (Waymo: its confidences need not sum to one, and it treats all-zero ones as uniform).
    Uniform,
}

/// What probability values a policy accepts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ProbabilityCheck {
    /// Any finite value >= 0; scores need not sum to one (Argoverse 1).
    NonNegative,
    /// Any finite value, negative ones included: scores that rank (Waymo's confidences, which
    /// its code neither checks nor normalizes, so logits are accepted too). Renormalizing
    /// treats kept scores whose sum is not positive as a row without mass (`zero_mass`).
    Finite,
    /// Every value in [0, 1] (av2's `_compute_brier_score`).
    UnitInterval,
    /// Every value in [0, 1] and each row summing to one within `tolerance` (av2 submissions,
    /// which use `np.isclose`: about 1e-5).
    SumToOne {
        /// Largest accepted |sum - 1|.
        tolerance: f64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waymo_speed_scale_is_constant_outside_the_bounds_and_linear_between() {
        let scaling = SpeedScaling::waymo();
        assert_eq!(scaling.scale(0.0), 0.5);
        assert_eq!(scaling.scale(1.39), 0.5);
        // Waymo's bound is the float 1.4f (1.39999997...): 1.4 itself is above it.
        assert!(scaling.scale(1.4) > 0.5);
        assert_eq!(scaling.scale(f64::from(1.4f32)), 0.5);
        assert_eq!(scaling.scale(30.0), 1.0);
        assert!(
            (scaling.scale(6.2) - 0.75).abs() < 1e-8,
            "the bounds are floats"
        );
        assert_eq!(SpeedScaling::none().scale(5.0), 1.0);
    }
}
