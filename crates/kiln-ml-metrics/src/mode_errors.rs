//! The host kernel: per-hypothesis ADE, FDE and miss flags of one prediction at every horizon.

use crate::batch::TrajectoryBatch;
use crate::config::{MetricsConfig, MissBox};
use crate::policy::{FinalStep, MissRule};

/// What one batch needs resolved before its agents are measured.
#[derive(Debug, Clone)]
pub(crate) struct BatchPlan {
    /// Last step of each horizon, in configuration order.
    pub last_steps: Vec<usize>,
    /// Horizon indices sorted by last step, so one pass over the steps serves them all.
    pub ascending: Vec<usize>,
    /// The largest last step.
    pub max_step: usize,
    /// Kept modes per configured K.
    pub kept: Vec<usize>,
    /// Indices into `kept` from the fewest kept modes to the most, for one running selection.
    pub kept_ascending: Vec<usize>,
    /// Miss boxes per horizon (lateral/longitudinal rule only).
    pub boxes: Vec<Option<MissBox>>,
}

impl BatchPlan {
    pub(crate) fn new(config: &MetricsConfig, last_steps: Vec<usize>, modes: usize) -> Self {
        let mut ascending: Vec<usize> = (0..last_steps.len()).collect();
        ascending.sort_by_key(|&h| last_steps[h]);
        let kept = config.kept_modes(modes);
        let mut kept_ascending: Vec<usize> = (0..kept.len()).collect();
        kept_ascending.sort_by_key(|&index| kept[index]);
        Self {
            max_step: last_steps.iter().copied().max().unwrap_or(0),
            ascending,
            kept,
            kept_ascending,
            boxes: config.horizons.iter().map(|h| h.miss_box).collect(),
            last_steps,
        }
    }
}

/// Per-hypothesis errors of one prediction (one agent, or the mean over a joint prediction's
/// agents), indexed `[horizon * K + mode]`.
#[derive(Debug, Clone)]
pub(crate) struct UnitErrors {
    pub modes: usize,
    pub ade: Vec<f64>,
    pub fde: Vec<f64>,
    pub miss: Vec<bool>,
    /// Agents that miss, per hypothesis (the actor miss rate).
    pub agent_misses: Vec<u32>,
    /// Whether every agent has at least one valid step, per horizon.
    pub has_path: Vec<bool>,
    /// Whether every agent has a final step, per horizon.
    pub has_final: Vec<bool>,
    distances: Vec<f32>,
    counts: Vec<usize>,
    finals: Vec<Option<usize>>,
}

impl UnitErrors {
    pub(crate) fn new(horizons: usize, modes: usize, steps: usize) -> Self {
        Self {
            modes,
            ade: vec![0.0; horizons * modes],
            fde: vec![0.0; horizons * modes],
            miss: vec![false; horizons * modes],
            agent_misses: vec![0; horizons * modes],
            has_path: vec![true; horizons],
            has_final: vec![true; horizons],
            distances: vec![0.0; steps],
            counts: vec![0; horizons],
            finals: vec![None; horizons],
        }
    }

    /// Turns the sums over a joint prediction's `agents` into their means, dividing the total
    /// once as Waymo's `total / count` and numpy's `mean` do (adding `1/N`-weighted values
    /// rounds differently, which can flip the selected world on near-ties).
    pub(crate) fn average_over(&mut self, agents: usize) {
        if agents > 1 {
            let agents = agents as f64;
            for value in self.ade.iter_mut().chain(self.fde.iter_mut()) {
                *value /= agents;
            }
        }
    }

    /// Clears the errors for the next prediction.
    pub(crate) fn reset(&mut self) {
        self.ade.fill(0.0);
        self.fde.fill(0.0);
        self.miss.fill(false);
        self.agent_misses.fill(0);
        self.has_path.fill(true);
        self.has_final.fill(true);
    }

    /// Adds agent `agent` of `batch` to the prediction's sums (see
    /// [`average_over`](Self::average_over)).
    pub(crate) fn add_agent(
        &mut self,
        config: &MetricsConfig,
        plan: &BatchPlan,
        batch: &TrajectoryBatch<'_>,
        agent: usize,
    ) {
        let shape = batch.shape();
        let (k_modes, steps) = (shape.modes, shape.steps);
        let truth = &batch.ground_truth()[agent * steps * 2..][..steps * 2];
        let valid = batch.valid().map(|v| &v[agent * steps..][..steps]);
        self.resolve_steps(config.final_step, plan, valid);

        let used = plan.max_step + 1;
        for mode in 0..k_modes {
            let forecast = &batch.predictions()[(agent * k_modes + mode) * steps * 2..][..used * 2];
            distances(forecast, &truth[..used * 2], &mut self.distances[..used]);
            let mut sum = 0.0f64;
            let mut max = 0.0f32;
            let mut start = 0;
            for &h in &plan.ascending {
                let end = plan.last_steps[h] + 1;
                if start < end {
                    let segment = &self.distances[start..end];
                    match valid {
                        None => sum += lane_sum(segment),
                        Some(valid) => sum += masked_sum(segment, &valid[start..end]),
                    }
                    if let MissRule::MaxDistance { .. } = config.miss {
                        max = max.max(masked_max(segment, valid.map(|v| &v[start..end])));
                    }
                    start = end;
                }
                let slot = h * k_modes + mode;
                let count = self.counts[h];
                if count > 0 {
                    self.ade[slot] += sum / count as f64;
                }
                // The largest distance up to this horizon, recomputed in f64 when f32 puts it
                // too close to the threshold to decide (the references compute in f64).
                let exact_max = || max_distance_f64(forecast, truth, valid, plan.last_steps[h] + 1);
                let Some(last) = self.finals[h] else {
                    if let MissRule::MaxDistance { .. } = config.miss {
                        self.record_miss(
                            slot,
                            count > 0 && misses_max(config.miss, max, exact_max),
                        );
                    }
                    continue;
                };
                // FDE in f64 from the coordinates, as the references compute it: the miss and
                // the min-FDE mode then decide as theirs do at the threshold and on near-ties.
                let fde = distance_f64(forecast, truth, last);
                self.fde[slot] += fde;
                let missed = match config.miss {
                    MissRule::FinalDistance { threshold_m } => fde > threshold_m,
                    MissRule::MaxDistance { .. } => misses_max(config.miss, max, exact_max),
                    MissRule::LateralLongitudinal { speed_scaling } => {
                        let (Some(velocity), Some(heading), Some(miss_box)) =
                            (batch.velocity(), batch.heading(), plan.boxes[h])
                        else {
                            // Checked before any agent is measured.
                            continue;
                        };
                        // A float hypot, as Waymo's `std::hypot` of its float velocity: an f64
                        // one differs in the last bits, enough to flip a miss at the box's edge.
                        let speed = f64::from(velocity[agent * 2].hypot(velocity[agent * 2 + 1]));
                        let scale = speed_scaling.scale(speed);
                        // In f64, as Waymo (float prediction minus double track): an f32
                        // difference rounds near the box's edge.
                        let (dx, dy) = displacement_f64(forecast, truth, last);
                        let (sin, cos) = f64::from(heading[agent * steps + last]).sin_cos();
                        misses_box(dx, dy, sin, cos, scale, miss_box)
                    }
                };
                self.record_miss(slot, missed);
            }
        }
    }

    /// One agent's miss flag for one hypothesis: the prediction misses when any agent does.
    #[inline]
    fn record_miss(&mut self, slot: usize, missed: bool) {
        self.miss[slot] |= missed;
        self.agent_misses[slot] += u32::from(missed);
    }

    /// Valid-step counts and final steps per horizon for one agent.
    fn resolve_steps(&mut self, final_step: FinalStep, plan: &BatchPlan, valid: Option<&[bool]>) {
        for (h, &last) in plan.last_steps.iter().enumerate() {
            let (count, last_valid) = match valid {
                None => (last + 1, Some(last)),
                Some(valid) => {
                    let window = &valid[..=last];
                    let count = window.iter().filter(|&&v| v).count();
                    let last_valid = match final_step {
                        FinalStep::LastValid => window.iter().rposition(|&v| v),
                        FinalStep::AtHorizon => valid[last].then_some(last),
                    };
                    (count, last_valid)
                }
            };
            self.counts[h] = count;
            self.finals[h] = last_valid;
            self.has_path[h] &= count > 0;
            self.has_final[h] &= last_valid.is_some();
        }
    }
}

/// Waymo's `IsMatch` for one agent: a miss when either scaled displacement exceeds its threshold.
pub(crate) fn misses_box(
    dx: f64,
    dy: f64,
    sin: f64,
    cos: f64,
    scale: f64,
    miss_box: MissBox,
) -> bool {
    let longitudinal = dx * cos + dy * sin;
    let lateral = -dx * sin + dy * cos;
    lateral.abs() / scale > miss_box.lateral_m
        || longitudinal.abs() / scale > miss_box.longitudinal_m
}

/// Relative error bound of an f32 distance (a difference, two squares, a sum, a square root:
/// a few roundings of 2^-24 each), with room to spare.
const F32_DISTANCE_TOLERANCE: f64 = 1e-6;

/// Whether the largest distance `max` (f32) misses under the max-distance rule; within the f32
/// error of the threshold, `exact` (the same maximum in f64) decides.
fn misses_max(rule: MissRule, max: f32, exact: impl FnOnce() -> f64) -> bool {
    let MissRule::MaxDistance {
        threshold_m,
        inclusive,
    } = rule
    else {
        return false;
    };
    let mut max = f64::from(max);
    if (max - threshold_m).abs() <= threshold_m.abs() * F32_DISTANCE_TOLERANCE {
        max = exact();
    }
    if inclusive {
        max >= threshold_m
    } else {
        max > threshold_m
    }
}

/// `forecast[t] - truth[t]` in f64 for interleaved (x, y) points.
#[inline]
fn displacement_f64(forecast: &[f32], truth: &[f32], t: usize) -> (f64, f64) {
    (
        f64::from(forecast[2 * t]) - f64::from(truth[2 * t]),
        f64::from(forecast[2 * t + 1]) - f64::from(truth[2 * t + 1]),
    )
}

/// `|forecast[t] - truth[t]|` in f64 for interleaved (x, y) points.
#[inline]
fn distance_f64(forecast: &[f32], truth: &[f32], t: usize) -> f64 {
    let (dx, dy) = displacement_f64(forecast, truth, t);
    (dx * dx + dy * dy).sqrt()
}

/// The largest f64 distance over the valid steps before `end` (0 with none).
fn max_distance_f64(forecast: &[f32], truth: &[f32], valid: Option<&[bool]>, end: usize) -> f64 {
    (0..end)
        .filter(|&t| valid.is_none_or(|valid| valid[t]))
        .map(|t| distance_f64(forecast, truth, t))
        .fold(0.0, f64::max)
}

/// `out[t] = |forecast[t] - truth[t]|` for interleaved (x, y) points.
#[inline]
fn distances(forecast: &[f32], truth: &[f32], out: &mut [f32]) {
    for ((out, f), g) in out
        .iter_mut()
        .zip(forecast.chunks_exact(2))
        .zip(truth.chunks_exact(2))
    {
        let dx = f[0] - g[0];
        let dy = f[1] - g[1];
        *out = (dx * dx + dy * dy).sqrt();
    }
}

/// A sum in eight f64 lanes, which the compiler can vectorize (a single chain cannot be). In
/// f64, as the references add: an f32 sum of a horizon's distances drifts by a few 1e-7
/// relative, beyond what Argoverse 2's tests allow (numpy's `assert_allclose`, 1e-7).
#[inline]
fn lane_sum(values: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = values.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().copied().map(f64::from).sum();
    for chunk in chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(value);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

fn masked_sum(values: &[f32], valid: &[bool]) -> f64 {
    values
        .iter()
        .zip(valid)
        .map(|(&d, &v)| if v { f64::from(d) } else { 0.0 })
        .sum()
}

fn masked_max(values: &[f32], valid: Option<&[bool]>) -> f32 {
    match valid {
        None => values.iter().copied().fold(0.0, f32::max),
        Some(valid) => values
            .iter()
            .zip(valid)
            .filter(|(_, v)| **v)
            .map(|(&d, _)| d)
            .fold(0.0, f32::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_sum_matches_a_plain_sum() {
        let values: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        assert_eq!(
            lane_sum(&values),
            values.iter().copied().map(f64::from).sum::<f64>()
        );
        assert_eq!(lane_sum(&[]), 0.0);
    }

    #[test]
    fn box_rotates_into_the_heading() {
        let miss_box = MissBox {
            lateral_m: 1.0,
            longitudinal_m: 2.0,
        };
        let (sin, cos) = std::f64::consts::FRAC_PI_4.sin_cos();
        // 1.9 m along a 45 degree heading is longitudinal: a hit.
        let along = 1.9 / 2f64.sqrt();
        assert!(!misses_box(along, along, sin, cos, 1.0, miss_box));
        // The same 1.9 m across the heading is lateral: a miss; at scale 2 it is a hit.
        assert!(misses_box(-along, along, sin, cos, 1.0, miss_box));
        assert!(!misses_box(-along, along, sin, cos, 2.0, miss_box));
    }
}
