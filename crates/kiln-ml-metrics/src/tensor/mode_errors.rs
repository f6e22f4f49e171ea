//! Per-hypothesis errors on the device, mirroring the host kernel in `mode_errors.rs`.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::config::{MetricsConfig, MissBox};
use crate::policy::{FinalStep, MissRule};
use crate::tensor::TensorTrajectoryBatch;

/// Per-prediction errors of one horizon; `[P, K]` values and `[P, 1]` 0/1 flags.
pub(crate) struct DeviceErrors<B: Backend> {
    pub ade: Tensor<B, 2>,
    pub fde: Tensor<B, 2>,
    pub miss: Tensor<B, 2>,
    /// Agents that miss per hypothesis (the actor miss rate).
    pub agent_misses: Tensor<B, 2>,
    pub has_path: Tensor<B, 2>,
    pub has_final: Tensor<B, 2>,
}

/// Displacements shared by every horizon: `diff [N, K, U, 2]` and `distance [N, K, U]`
/// over the first `U` steps.
pub(crate) struct Displacements<B: Backend> {
    pub diff: Tensor<B, 4>,
    pub distance: Tensor<B, 3>,
}

impl<B: Backend> Displacements<B> {
    pub(crate) fn new(batch: &TensorTrajectoryBatch<B>, used_steps: usize) -> Self {
        let [n, k, _, _] = batch.predictions.dims();
        let predictions = batch.predictions.clone().narrow(2, 0, used_steps);
        let truth = batch.ground_truth.clone().narrow(1, 0, used_steps);
        let diff = predictions - truth.unsqueeze_dim::<4>(1);
        // `x * x`, not `powi`: the host's operations, so exact ties stay ties on both paths.
        let distance = (diff.clone() * diff.clone())
            .sum_dim(3)
            .sqrt()
            .reshape([n, k, used_steps]);
        Self { diff, distance }
    }
}

/// The errors of every agent at the horizon ending at `last_step`, grouped into predictions.
pub(crate) fn horizon_errors<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
    shared: &Displacements<B>,
    last_step: usize,
    miss_box: Option<MissBox>,
) -> DeviceErrors<B> {
    let [n, k, _, _] = shared.diff.dims();
    let steps = last_step + 1;
    let device = shared.diff.device();
    let distance = shared.distance.clone().narrow(2, 0, steps);
    let ones = || Tensor::<B, 2>::ones([n, 1], &device);
    // Only the miss rule's inputs are computed: each is a pass over [N, K, S].
    let wants_max = matches!(config.miss, MissRule::MaxDistance { .. });
    let wants_box = matches!(config.miss, MissRule::LateralLongitudinal { .. });

    // Per agent: ADE [N, K], FDE [N, K], final displacement [N, K, 2], final heading [N, 1].
    let (ade, fde, max, final_diff, final_heading, has_path, has_final);
    match &batch.valid {
        None => {
            ade = distance
                .clone()
                .sum_dim(2)
                .reshape([n, k])
                .div_scalar(steps as f32);
            fde = distance.clone().narrow(2, last_step, 1).reshape([n, k]);
            max = wants_max.then(|| distance.max_dim(2).reshape([n, k]));
            final_diff = wants_box.then(|| {
                shared
                    .diff
                    .clone()
                    .narrow(2, last_step, 1)
                    .reshape([n, k, 2])
            });
            final_heading = batch.heading.clone().map(|h| h.narrow(1, last_step, 1));
            has_path = ones();
            has_final = ones();
        }
        Some(valid) => {
            let valid = valid.clone().narrow(1, 0, steps).float();
            let count = valid.clone().sum_dim(1);
            let masked = distance * valid.clone().unsqueeze_dim::<3>(1);
            ade = masked.clone().sum_dim(2).reshape([n, k]) / count.clone().clamp_min(1.0);
            max = wants_max.then(|| masked.clone().max_dim(2).reshape([n, k]));
            has_path = count.greater_elem(0.0).float();
            // One-hot [N, S] of the final step; all zero when there is none.
            let (one_hot, final_flag) = match config.final_step {
                FinalStep::LastValid => {
                    let positions = Tensor::<B, 1, Int>::arange(1..steps as i64 + 1, &device)
                        .float()
                        .reshape([1, steps]);
                    let last = (valid.clone() * positions.clone()).max_dim(1);
                    let one_hot = positions
                        .expand([n, steps])
                        .equal(last.clone().expand([n, steps]))
                        .float();
                    (one_hot, last.greater_elem(0.0).float())
                }
                FinalStep::AtHorizon => {
                    let flag = valid.clone().narrow(1, last_step, 1);
                    let one_hot = Tensor::<B, 2>::zeros([n, steps], &device)
                        .slice_assign([0..n, last_step..steps], flag.clone());
                    (one_hot, flag)
                }
            };
            fde = (masked * one_hot.clone().unsqueeze_dim::<3>(1))
                .sum_dim(2)
                .reshape([n, k]);
            final_diff = wants_box.then(|| {
                let diff = shared.diff.clone().narrow(2, 0, steps);
                (diff * one_hot.clone().reshape([n, 1, steps, 1]))
                    .sum_dim(2)
                    .reshape([n, k, 2])
            });
            final_heading = batch
                .heading
                .clone()
                .map(|h| (h.narrow(1, 0, steps) * one_hot).sum_dim(1));
            has_final = final_flag;
        }
    }

    let miss = match (config.miss, max) {
        (MissRule::FinalDistance { threshold_m }, _) => fde
            .clone()
            .greater_elem(f32_at_or_below(threshold_m))
            .float(),
        (
            MissRule::MaxDistance {
                threshold_m,
                inclusive: true,
            },
            Some(max),
        ) => max.greater_equal_elem(f32_at_or_above(threshold_m)).float(),
        (MissRule::MaxDistance { threshold_m, .. }, Some(max)) => {
            max.greater_elem(f32_at_or_below(threshold_m)).float()
        }
        (MissRule::LateralLongitudinal { speed_scaling: s }, _) => {
            // Motion inputs and the box are checked before any tensor work.
            match (final_heading, &batch.velocity, miss_box, final_diff) {
                (Some(heading), Some(velocity), Some(miss_box), Some(final_diff)) => {
                    let speed = velocity.clone().powi_scalar(2).sum_dim(1).sqrt();
                    let fraction = speed
                        .sub_scalar(s.lower_speed_mps as f32)
                        .div_scalar((s.upper_speed_mps - s.lower_speed_mps) as f32)
                        .clamp(0.0, 1.0);
                    let scale = fraction
                        .mul_scalar((s.upper_scale - s.lower_scale) as f32)
                        .add_scalar(s.lower_scale as f32);
                    let (sin, cos) = (heading.clone().sin(), heading.cos());
                    let dx = final_diff.clone().narrow(2, 0, 1).reshape([n, k]);
                    let dy = final_diff.narrow(2, 1, 1).reshape([n, k]);
                    let longitudinal = dx.clone() * cos.clone() + dy.clone() * sin.clone();
                    let lateral = dy * cos - dx * sin;
                    let lateral_miss =
                        (lateral.abs() / scale.clone()).greater_elem(miss_box.lateral_m as f32);
                    let longitudinal_miss =
                        (longitudinal.abs() / scale).greater_elem(miss_box.longitudinal_m as f32);
                    lateral_miss.bool_or(longitudinal_miss).float()
                }
                _ => Tensor::zeros([n, k], &device),
            }
        }
        // Not reached: the largest distance is computed whenever the rule needs it.
        (MissRule::MaxDistance { .. }, None) => Tensor::zeros([n, k], &device),
    };

    group(
        config.agents_per_prediction,
        DeviceErrors {
            ade,
            fde,
            agent_misses: miss.clone(),
            miss,
            has_path,
            has_final,
        },
    )
}

/// Joint predictions: mean errors over each group's agents, a miss when any agent misses (and
/// the number that miss), a value only when every agent has one.
fn group<B: Backend>(agents_per_prediction: usize, errors: DeviceErrors<B>) -> DeviceErrors<B> {
    if agents_per_prediction == 1 {
        return errors;
    }
    let [n, k] = errors.ade.dims();
    let (units, a) = (n / agents_per_prediction, agents_per_prediction);
    let mean = |t: Tensor<B, 2>| t.reshape([units, a, k]).mean_dim(1).reshape([units, k]);
    let flags = |t: Tensor<B, 2>| t.reshape([units, a]).min_dim(1);
    DeviceErrors {
        ade: mean(errors.ade),
        fde: mean(errors.fde),
        miss: errors
            .miss
            .reshape([units, a, k])
            .max_dim(1)
            .reshape([units, k]),
        agent_misses: errors
            .agent_misses
            .reshape([units, a, k])
            .sum_dim(1)
            .reshape([units, k]),
        has_path: flags(errors.has_path),
        has_final: flags(errors.has_final),
    }
}

/// The largest `f32` at or below `threshold`: for an `f32` distance `d`, `d > threshold` (the
/// host's comparison, in `f64`) exactly when `d` is above it. `threshold as f32` rounds to the
/// nearest, which may be above (9.01 becomes 9.0100002), and a distance equal to that would
/// miss on the host but not here.
fn f32_at_or_below(threshold: f64) -> f32 {
    let rounded = threshold as f32;
    if f64::from(rounded) > threshold {
        rounded.next_down()
    } else {
        rounded
    }
}

/// The smallest `f32` at or above `threshold`: `d >= threshold` exactly when `d` is at or above
/// it.
fn f32_at_or_above(threshold: f64) -> f32 {
    let rounded = threshold as f32;
    if f64::from(rounded) < threshold {
        rounded.next_up()
    } else {
        rounded
    }
}
