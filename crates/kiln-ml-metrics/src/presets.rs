//! The benchmark presets: each reproduces one benchmark's published numbers.
//!
//! The differences between them are listed in `docs/metrics.md`.

use crate::config::{Horizon, MetricsConfig};
use crate::policy::{
    FinalStep, MissRule, ModeSelection, ProbabilityCheck, ProbabilityPolicy, Pruning, SpeedScaling,
    TieOrder, ZeroMass, waymo_float,
};

/// Argoverse 1's `LOW_PROB_THRESHOLD_FOR_METRICS`.
const LOW_PROBABILITY_FLOOR: f64 = 0.05;

impl MetricsConfig {
    /// Argoverse 1 (`get_displacement_errors_and_miss_rate`): K = 1 and 6, the first 30 steps,
    /// the most probable K by a stable sort (first K without probabilities), kept
    /// probabilities renormalized, min-FDE mode, miss when minFDE > 2 m.
    pub fn argoverse1() -> Self {
        Self {
            name: "argoverse1".into(),
            top_k: vec![1, 6],
            horizons: vec![Horizon::first_steps(30)],
            selection: ModeSelection::MinFde,
            pruning: Pruning::ByProbability {
                ties: TieOrder::LowerIndexFirst,
            },
            miss: MissRule::FinalDistance { threshold_m: 2.0 },
            final_step: FinalStep::LastValid,
            probabilities: ProbabilityPolicy {
                check: ProbabilityCheck::NonNegative,
                renormalize: true,
                low_probability_floor: LOW_PROBABILITY_FLOOR,
                zero_mass: ZeroMass::Refuse,
            },
            agents_per_prediction: 1,
        }
    }

    /// Argoverse 2 single-agent motion forecasting (`av2` with the leaderboard convention):
    /// K = 1 and 6 over the full 60 steps, min-FDE mode, miss when minFDE > 2 m, probabilities
    /// in [0, 1] summing to one (as submissions must) and used as given.
    pub fn argoverse2() -> Self {
        Self {
            name: "argoverse2".into(),
            top_k: vec![1, 6],
            horizons: vec![Horizon::full()],
            selection: ModeSelection::MinFde,
            pruning: Pruning::ByProbability {
                ties: TieOrder::LowerIndexFirst,
            },
            miss: MissRule::FinalDistance { threshold_m: 2.0 },
            final_step: FinalStep::LastValid,
            probabilities: ProbabilityPolicy {
                // av2 checks `np.isclose(sum, 1)`: |sum - 1| <= atol + rtol * 1 = 1e-8 + 1e-5.
                check: ProbabilityCheck::SumToOne {
                    tolerance: 1e-5 + 1e-8,
                },
                renormalize: false,
                low_probability_floor: LOW_PROBABILITY_FLOOR,
                zero_mass: ZeroMass::Refuse,
            },
            agents_per_prediction: 1,
        }
    }

    /// nuScenes prediction challenge: K = 1, 5 and 10 over every step of the batch (12 at the
    /// challenge's 6 s and 2 Hz), the most probable K (higher index first on ties, as numpy's
    /// reversed argsort; see [`TieOrder::HigherIndexFirst`] for where numpy's order is its
    /// own), independent minima, miss when the largest distance of every kept mode is >= 2 m.
    ///
    /// Probabilities only rank, as in the devkit, which checks neither their range nor their
    /// sum (its own tests pass all zeros): any finite values are accepted, and kept modes
    /// without mass share it equally in the probability-weighted extras (brier, p-min).
    pub fn nuscenes() -> Self {
        Self {
            name: "nuscenes".into(),
            top_k: vec![1, 5, 10],
            horizons: vec![Horizon::full()],
            selection: ModeSelection::Independent,
            pruning: Pruning::ByProbability {
                ties: TieOrder::HigherIndexFirst,
            },
            miss: MissRule::MaxDistance {
                threshold_m: 2.0,
                inclusive: true,
            },
            final_step: FinalStep::LastValid,
            probabilities: ProbabilityPolicy {
                check: ProbabilityCheck::Finite,
                renormalize: true,
                low_probability_floor: LOW_PROBABILITY_FLOOR,
                zero_mass: ZeroMass::Uniform,
            },
            agents_per_prediction: 1,
        }
    }

    /// Waymo Open Motion challenge: 16 predicted points at 2 Hz, measured at steps 5, 9 and 15
    /// (3, 5 and 8 s), the first 6 hypotheses as submitted, independent minima, ADE over valid
    /// steps, FDE and misses only where the ground truth is valid at the step, and the
    /// speed-scaled lateral/longitudinal miss box (1.0/2.0, 1.8/3.6, 3.0/6.0 m).
    ///
    /// For the interactive challenge set `agents_per_prediction = 2`. Waymo reports each
    /// object type separately: feed one metric per type and average the results (a joint
    /// prediction counts under the type of highest priority among its agents: unset < other <
    /// vehicle < pedestrian < cyclist). The report's brier and p-min figures, from the
    /// renormalized confidences, are kiln's: Waymo defines neither.
    pub fn waymo() -> Self {
        Self {
            name: "waymo".into(),
            top_k: vec![6],
            horizons: vec![
                Horizon::at_step(5).with_miss_box(1.0, 2.0),
                // Waymo's thresholds are proto floats: 1.8 and 3.6 as f32 (1.0, 2.0, 3.0 and
                // 6.0 are exact either way).
                Horizon::at_step(9).with_miss_box(waymo_float(1.8), waymo_float(3.6)),
                Horizon::at_step(15).with_miss_box(3.0, 6.0),
            ],
            selection: ModeSelection::Independent,
            pruning: Pruning::FirstK,
            miss: MissRule::LateralLongitudinal {
                speed_scaling: SpeedScaling::waymo(),
            },
            final_step: FinalStep::AtHorizon,
            probabilities: ProbabilityPolicy {
                check: ProbabilityCheck::Finite,
                renormalize: true,
                low_probability_floor: LOW_PROBABILITY_FLOOR,
                zero_mass: ZeroMass::Uniform,
            },
            agents_per_prediction: 1,
        }
    }
}
