//! [`MetricsConfig`]: what to measure and by which benchmark's rules.

use serde::{Deserialize, Serialize};

use crate::policy::{
    FinalStep, MissRule, ModeSelection, ProbabilityCheck, ProbabilityPolicy, Pruning,
};
use crate::{Error, Result};

/// One measurement horizon: the steps `0..=last_step` of every trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Horizon {
    /// The last step measured (0-based, inclusive); `None` means the last step of each batch.
    pub last_step: Option<usize>,
    /// Waymo's lateral/longitudinal miss thresholds at this horizon; required by
    /// [`MissRule::LateralLongitudinal`], ignored otherwise.
    pub miss_box: Option<MissBox>,
}

impl Horizon {
    /// Every step of the batch.
    pub fn full() -> Self {
        Self {
            last_step: None,
            miss_box: None,
        }
    }

    /// The first `steps` steps (Argoverse 1's `horizon`: 30 steps = 3 s at 10 Hz).
    ///
    /// `steps` must be at least 1; zero is rejected when the configuration is validated.
    pub fn first_steps(steps: usize) -> Self {
        Self {
            last_step: Some(steps.wrapping_sub(1)),
            miss_box: None,
        }
    }

    /// The steps up to and including `step` (Waymo's `measurement_step`).
    pub fn at_step(step: usize) -> Self {
        Self {
            last_step: Some(step),
            miss_box: None,
        }
    }

    /// Sets Waymo's miss thresholds for this horizon.
    pub fn with_miss_box(mut self, lateral_m: f64, longitudinal_m: f64) -> Self {
        self.miss_box = Some(MissBox {
            lateral_m,
            longitudinal_m,
        });
        self
    }

    /// The last step for a batch of `steps` steps.
    pub(crate) fn resolve(&self, index: usize, steps: usize) -> Result<usize> {
        match self.last_step {
            None => Ok(steps - 1),
            Some(last_step) if last_step < steps => Ok(last_step),
            Some(last_step) => Err(Error::HorizonOutOfRange {
                horizon: index,
                last_step,
                steps,
            }),
        }
    }
}

/// Waymo's miss thresholds at one horizon, before speed scaling.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MissBox {
    /// Lateral threshold in meters (Waymo: 1.0 / 1.8 / 3.0 at 3 / 5 / 8 s).
    pub lateral_m: f64,
    /// Longitudinal threshold in meters (Waymo: 2.0 / 3.6 / 6.0 at 3 / 5 / 8 s).
    pub longitudinal_m: f64,
}

/// What to measure and by which benchmark's rules.
///
/// Start from a preset ([`argoverse1`](Self::argoverse1), [`argoverse2`](Self::argoverse2),
/// [`nuscenes`](Self::nuscenes), [`waymo`](Self::waymo)) and change fields as needed;
/// [`validate`](Self::validate) runs when a metric is built from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsConfig {
    /// A short name for reports (`argoverse2`, or your own).
    pub name: String,
    /// The K values of minADE@K, minFDE@K and the miss rate; a K above the number of submitted
    /// modes uses them all (nuScenes clamps the same way).
    pub top_k: Vec<usize>,
    /// The horizons measured in one pass.
    pub horizons: Vec<Horizon>,
    /// Which mode minADE is read from.
    pub selection: ModeSelection,
    /// Which K hypotheses are kept.
    pub pruning: Pruning,
    /// What counts as a miss.
    pub miss: MissRule,
    /// Where FDE is measured when a validity mask is given.
    pub final_step: FinalStep,
    /// How probabilities are checked and used.
    pub probabilities: ProbabilityPolicy,
    /// Consecutive agents that form one joint prediction (Waymo's interactive challenge: 2):
    /// their hypotheses share one probability row, a hypothesis's errors are the mean over its
    /// agents, it hits only when every agent hits, and the prediction is measured once.
    pub agents_per_prediction: usize,
}

impl MetricsConfig {
    /// Checks that every field can work; called by the metrics' constructors.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        if self.top_k.is_empty() {
            return invalid("`top_k` is empty: give at least one K".into());
        }
        if let Some(position) = self.top_k.iter().position(|&k| k == 0) {
            return invalid(format!("`top_k[{position}]` is 0: K must be at least 1"));
        }
        if self.horizons.is_empty() {
            return invalid("`horizons` is empty: give at least one horizon".into());
        }
        for (index, horizon) in self.horizons.iter().enumerate() {
            if horizon.last_step == Some(usize::MAX) {
                return invalid(format!("`horizons[{index}]` has zero steps"));
            }
            if let MissRule::LateralLongitudinal { .. } = self.miss {
                match horizon.miss_box {
                    None => {
                        return invalid(format!(
                            "`horizons[{index}]` has no `miss_box`, which the lateral/longitudinal miss rule needs"
                        ));
                    }
                    Some(MissBox {
                        lateral_m,
                        longitudinal_m,
                    }) if !(lateral_m > 0.0
                        && longitudinal_m > 0.0
                        && lateral_m.is_finite()
                        && longitudinal_m.is_finite()) =>
                    {
                        return invalid(format!(
                            "`horizons[{index}].miss_box` thresholds must be finite and positive, got lateral {lateral_m} and longitudinal {longitudinal_m}"
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        match self.miss {
            MissRule::FinalDistance { threshold_m } | MissRule::MaxDistance { threshold_m, .. }
                if !(threshold_m.is_finite() && threshold_m >= 0.0) =>
            {
                return invalid(format!(
                    "the miss threshold must be finite and >= 0, got {threshold_m}"
                ));
            }
            MissRule::LateralLongitudinal { speed_scaling: s }
                if !(s.lower_speed_mps.is_finite()
                    && s.upper_speed_mps.is_finite()
                    && s.upper_speed_mps > s.lower_speed_mps
                    && s.lower_scale > 0.0
                    && s.upper_scale > 0.0
                    && s.lower_scale.is_finite()
                    && s.upper_scale.is_finite()) =>
            {
                return invalid(format!(
                    "speed scaling needs finite bounds with upper > lower and positive scales, got {s:?}"
                ));
            }
            _ => {}
        }
        if let ProbabilityCheck::SumToOne { tolerance } = self.probabilities.check
            && !(tolerance.is_finite() && tolerance >= 0.0)
        {
            return invalid(format!(
                "the probability-sum tolerance must be finite and >= 0, got {tolerance}"
            ));
        }
        let floor = self.probabilities.low_probability_floor;
        if !(floor > 0.0 && floor <= 1.0) {
            return invalid(format!(
                "`low_probability_floor` must be in (0, 1], got {floor}"
            ));
        }
        if self.agents_per_prediction == 0 {
            return invalid("`agents_per_prediction` must be at least 1".into());
        }
        Ok(())
    }

    /// Whether the miss rule needs `velocity` and `heading`.
    pub(crate) fn needs_motion(&self) -> bool {
        matches!(self.miss, MissRule::LateralLongitudinal { .. })
    }

    /// Whether an agent's miss is the selected (min-FDE) mode's rather than every kept mode's:
    /// under [`ModeSelection::MinFde`], except for the max distance, whose miss is the minimum
    /// over modes whatever the selection (nuScenes; QCNet's MAXDE under its min-FDE default).
    pub(crate) fn miss_from_selected_mode(&self) -> bool {
        self.selection == ModeSelection::MinFde
            && !matches!(self.miss, MissRule::MaxDistance { .. })
    }

    /// Whether a miss needs a final step: under max distance an agent with any valid step can
    /// be scored (its miss is every kept mode's, whatever the selection, and needs no FDE).
    pub(crate) fn miss_needs_final(&self) -> bool {
        !matches!(self.miss, MissRule::MaxDistance { .. })
    }

    /// The K values with their kept-mode counts for `modes` submitted modes, in config order.
    pub(crate) fn kept_modes(&self, modes: usize) -> Vec<usize> {
        self.top_k.iter().map(|&k| k.min(modes)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate() {
        for config in [
            MetricsConfig::argoverse1(),
            MetricsConfig::argoverse2(),
            MetricsConfig::nuscenes(),
            MetricsConfig::waymo(),
        ] {
            config.validate().unwrap();
        }
    }

    /// The constants each benchmark publishes (reference/metrics.md), which the vector tests
    /// override with their own thresholds and steps: pinned here.
    #[test]
    fn presets_hold_each_benchmarks_constants() {
        let waymo = MetricsConfig::waymo();
        assert_eq!(waymo.top_k, [6]);
        let steps: Vec<Option<usize>> = waymo.horizons.iter().map(|h| h.last_step).collect();
        assert_eq!(steps, [Some(5), Some(9), Some(15)], "3, 5 and 8 s at 2 Hz");
        let boxes: Vec<(f64, f64)> = waymo
            .horizons
            .iter()
            .map(|h| {
                let miss_box = h.miss_box.unwrap();
                (miss_box.lateral_m, miss_box.longitudinal_m)
            })
            .collect();
        let float = |value: f32| f64::from(value);
        assert_eq!(boxes, [(1.0, 2.0), (float(1.8), float(3.6)), (3.0, 6.0)]);
        let MissRule::LateralLongitudinal { speed_scaling } = waymo.miss else {
            panic!("{:?}", waymo.miss);
        };
        let scaling = (
            speed_scaling.lower_speed_mps,
            speed_scaling.upper_speed_mps,
            speed_scaling.lower_scale,
            speed_scaling.upper_scale,
        );
        assert_eq!(scaling, (float(1.4), 11.0, 0.5, 1.0));
        for (config, top_k) in [
            (MetricsConfig::argoverse1(), vec![1, 6]),
            (MetricsConfig::argoverse2(), vec![1, 6]),
        ] {
            assert_eq!(config.top_k, top_k, "{}", config.name);
            assert_eq!(config.miss, MissRule::FinalDistance { threshold_m: 2.0 });
        }
        let first_30 = MetricsConfig::argoverse1().horizons[0].last_step;
        assert_eq!(first_30, Some(29), "3 s at 10 Hz");
        let nuscenes = MetricsConfig::nuscenes();
        assert_eq!(nuscenes.top_k, [1, 5, 10]);
        assert_eq!(
            nuscenes.miss,
            MissRule::MaxDistance {
                threshold_m: 2.0,
                inclusive: true,
            }
        );
    }

    #[test]
    fn impossible_values_are_rejected_by_name() {
        let mut config = MetricsConfig::argoverse2();
        config.top_k = vec![6, 0];
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("top_k[1]"), "{message}");

        let mut config = MetricsConfig::waymo();
        config.horizons.push(Horizon::at_step(3));
        let message = config.validate().unwrap_err().to_string();
        assert!(
            message.contains("horizons[3]") && message.contains("miss_box"),
            "{message}"
        );

        let mut config = MetricsConfig::argoverse1();
        config.horizons = vec![Horizon::first_steps(0)];
        assert!(config.validate().is_err());
    }

    #[test]
    fn horizons_resolve_against_the_batch() {
        assert_eq!(Horizon::full().resolve(0, 60), Ok(59));
        assert_eq!(Horizon::first_steps(30).resolve(0, 60), Ok(29));
        assert_eq!(
            Horizon::at_step(15).resolve(2, 12),
            Err(Error::HorizonOutOfRange {
                horizon: 2,
                last_step: 15,
                steps: 12
            })
        );
    }
}
