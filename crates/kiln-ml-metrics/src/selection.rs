//! Ranking and selection: from per-hypothesis errors to one prediction's metric values.

use crate::confidence_order::cmp_signless;
use crate::config::MetricsConfig;
use crate::mode_errors::{BatchPlan, UnitErrors};
use crate::policy::{ModeSelection, Pruning, TieOrder, ZeroMass};
use crate::sums::{MetricSums, TopKSums};

/// Fills `order` with the mode indices from highest to lowest rank.
///
/// Without probabilities, or with [`Pruning::FirstK`], the rank is the submission order.
pub(crate) fn rank_modes(
    pruning: Pruning,
    modes: usize,
    probabilities: Option<&[f32]>,
    order: &mut Vec<usize>,
) {
    order.clear();
    order.extend(0..modes);
    if let (Pruning::ByProbability { ties }, Some(p)) = (pruning, probabilities) {
        match ties {
            // `sort_by` is stable: equal probabilities keep the lower index first.
            TieOrder::LowerIndexFirst => order.sort_by(|&a, &b| cmp_signless(p[b], p[a])),
            TieOrder::HigherIndexFirst => {
                order.sort_by(|&a, &b| cmp_signless(p[b], p[a]).then(b.cmp(&a)))
            }
        }
    }
}

/// Adds one prediction's values to `sums`.
///
/// `order` lists the modes by rank; `probabilities` is the prediction's row, if any.
pub(crate) fn accumulate_unit(
    config: &MetricsConfig,
    plan: &BatchPlan,
    errors: &UnitErrors,
    order: &[usize],
    probabilities: Option<&[f32]>,
    sums: &mut MetricSums,
) {
    let modes = errors.modes;
    let top = order[0];
    // Under max distance an agent's miss needs only a valid step; otherwise a final step.
    let miss_needs_final = config.miss_needs_final();
    for (h, horizon) in sums.horizons.iter_mut().enumerate() {
        horizon.units += 1;
        let (has_path, has_final) = (errors.has_path[h], errors.has_final[h]);
        let ade = &errors.ade[h * modes..][..modes];
        let fde = &errors.fde[h * modes..][..modes];
        let miss = &errors.miss[h * modes..][..modes];
        if has_path {
            horizon.ade.add(ade[top]);
        }
        if has_final {
            horizon.fde.add(fde[top]);
        }
        if !has_path {
            continue;
        }
        let mut best_fde = order[0];
        let mut best_ade = order[0];
        let mut any_hit = false;
        let mut kept_probability = 0.0f64;
        let mut rank = 0;
        for &index in &plan.kept_ascending {
            let kept = plan.kept[index];
            // Extend the running selection to the `kept` best-ranked modes.
            while rank < kept {
                let mode = order[rank];
                // Strict `<`: on ties the earlier-ranked mode stays selected.
                if fde[mode] < fde[best_fde] {
                    best_fde = mode;
                }
                if ade[mode] < ade[best_ade] {
                    best_ade = mode;
                }
                any_hit |= !miss[mode];
                kept_probability += probabilities.map_or(0.0, |p| f64::from(p[mode]));
                rank += 1;
            }
            let ade_mode = match config.selection {
                ModeSelection::MinFde => best_fde,
                ModeSelection::Independent => best_ade,
            };
            let missed = if config.miss_from_selected_mode() {
                miss[best_fde]
            } else {
                !any_hit
            };
            let probability = |mode: usize| {
                probabilities.map(|p| {
                    let p = f64::from(p[mode]);
                    // Kept modes with no mass at all share it equally or keep none (the
                    // limit), rather than 0/0 poisoning every later merge with NaN.
                    if !config.probabilities.renormalize {
                        p
                    } else if kept_probability > 0.0 {
                        p / kept_probability
                    } else {
                        match config.probabilities.zero_mass {
                            ZeroMass::Uniform => 1.0 / rank as f64,
                            ZeroMass::Refuse => 0.0,
                        }
                    }
                })
            };
            let values = Selected {
                ade_ok: has_final || config.selection == ModeSelection::Independent,
                fde_ok: has_final,
                miss_ok: has_final || !miss_needs_final,
                min_ade: ade[ade_mode],
                min_fde: fde[best_fde],
                missed,
                ade_probability: probability(ade_mode),
                fde_probability: probability(best_fde),
            };
            values.add_to(
                &mut horizon.top_k[index],
                config.probabilities.low_probability_floor,
            );
            // av2's actor miss rate: every agent of the min-FDE joint hypothesis, whatever the
            // selection rule for minADE.
            let agents = config.agents_per_prediction;
            if agents > 1 && has_final {
                let misses = errors.agent_misses[h * modes + best_fde];
                horizon.top_k[index]
                    .actor_miss
                    .add_many(f64::from(misses), agents as u64);
            }
        }
    }
}

/// The selected values of one prediction for one K.
struct Selected {
    ade_ok: bool,
    fde_ok: bool,
    miss_ok: bool,
    min_ade: f64,
    min_fde: f64,
    missed: bool,
    ade_probability: Option<f64>,
    fde_probability: Option<f64>,
}

impl Selected {
    fn add_to(&self, sums: &mut TopKSums, floor: f64) {
        let miss = if self.missed { 1.0 } else { 0.0 };
        let brier = |p: f64| (1.0 - p).powi(2);
        let penalty = |p: f64| -p.max(floor).ln();
        if self.ade_ok {
            sums.min_ade.add(self.min_ade);
            if let Some(p) = self.ade_probability {
                sums.brier_min_ade.add(self.min_ade + brier(p));
                sums.p_min_ade.add(self.min_ade + penalty(p));
            }
        }
        if self.fde_ok {
            sums.min_fde.add(self.min_fde);
            if let Some(p) = self.fde_probability {
                sums.brier_min_fde.add(self.min_fde + brier(p));
                sums.p_min_fde.add(self.min_fde + penalty(p));
            }
        }
        if self.miss_ok {
            sums.miss.add(miss);
        }
        if self.miss_ok
            && self.fde_ok
            && let Some(p) = self.fde_probability
        {
            sums.p_miss.add(if self.missed { 1.0 } else { 1.0 - p });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_zero_probability_ties_with_zero() {
        let mut order = Vec::new();
        let by_probability = Pruning::ByProbability {
            ties: TieOrder::LowerIndexFirst,
        };
        rank_modes(by_probability, 2, Some(&[-0.0, 0.0]), &mut order);
        assert_eq!(order, [0, 1]);
    }

    #[test]
    fn ranking_orders_ties_as_configured() {
        let mut order = Vec::new();
        let p = [0.5, 0.5, 0.0];
        let stable = Pruning::ByProbability {
            ties: TieOrder::LowerIndexFirst,
        };
        rank_modes(stable, 3, Some(&p), &mut order);
        assert_eq!(order, [0, 1, 2]);
        // nuScenes: numpy's reversed argsort puts the higher index first.
        let reversed = Pruning::ByProbability {
            ties: TieOrder::HigherIndexFirst,
        };
        rank_modes(reversed, 3, Some(&p), &mut order);
        assert_eq!(order, [1, 0, 2]);
        rank_modes(stable, 3, Some(&[0.1, 0.3, 0.6]), &mut order);
        assert_eq!(order, [2, 1, 0]);
        rank_modes(Pruning::FirstK, 3, Some(&[0.1, 0.3, 0.6]), &mut order);
        assert_eq!(order, [0, 1, 2]);
    }
}
