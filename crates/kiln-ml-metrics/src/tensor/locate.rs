//! Input checks on the device, and naming the culprit on the host when one fails.
//!
//! Each check is a `[P]` row of per-prediction violation counts that rides along with the
//! metric rows in the batch's single read-back. Only when a count is non-zero is the offending
//! row copied to the host, where the host validators produce the same error as the host path.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::Error;
use crate::config::MetricsConfig;
use crate::input_checks::{check_finite, check_probability_row};
use crate::policy::{ProbabilityCheck, ZeroMass};
use crate::tensor::TensorTrajectoryBatch;

/// One field's per-prediction violation counts.
#[derive(Clone)]
pub(crate) struct Check<B: Backend> {
    pub field: &'static str,
    pub flags: Tensor<B, 1>,
}

/// The checks of every field present in `batch`, in a fixed order.
pub(crate) fn checks<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
) -> Vec<Check<B>> {
    let units = batch.agents() / config.agents_per_prediction;
    let per_unit = |flags: Tensor<B, 1>| {
        flags
            .reshape([units, config.agents_per_prediction])
            .sum_dim(1)
            .reshape([units])
    };
    let (n, k, t) = (batch.agents(), batch.modes(), batch.steps());
    // One reduction per field: a NaN or infinity anywhere makes its row's sum non-finite. (A
    // finite row whose sum overflows is flagged too; `locate_error` then finds nothing.)
    let row_flags = |values: Tensor<B, 2>| {
        values
            .sum_dim(1)
            .is_finite()
            .bool_not()
            .float()
            .reshape([n])
    };
    let mut checks = vec![
        Check {
            field: "predictions",
            flags: per_unit(row_flags(batch.predictions.clone().reshape([n, k * t * 2]))),
        },
        Check {
            field: "ground_truth",
            flags: per_unit(row_flags(batch.ground_truth.clone().reshape([n, t * 2]))),
        },
    ];
    for (field, tensor) in [("velocity", &batch.velocity), ("heading", &batch.heading)] {
        if let Some(tensor) = tensor {
            let flags = tensor
                .clone()
                .is_finite()
                .bool_not()
                .float()
                .sum_dim(1)
                .reshape([n]);
            checks.push(Check {
                field,
                flags: per_unit(flags),
            });
        }
    }
    if let Some(p) = &batch.probabilities {
        let policy = config.probabilities;
        let mut bad = p.clone().is_finite().bool_not().float();
        if !matches!(policy.check, ProbabilityCheck::Finite) {
            bad = bad + p.clone().lower_elem(0.0).float();
        }
        if !matches!(
            policy.check,
            ProbabilityCheck::Finite | ProbabilityCheck::NonNegative
        ) {
            bad = bad + p.clone().greater_elem(1.0).float();
        }
        let mut flags = bad.sum_dim(1);
        let total = p.clone().sum_dim(1);
        // The f32 sum on the device may round a row the host's f64 sum refuses back inside a
        // bound: rows within the sum's rounding of one are flagged too, and the host's check
        // decides. Each of the K - 1 additions rounds by at most half an ulp of its partial
        // sum, f32::EPSILON / 2 times it, in any order. (A tolerance below that flags every row:
        // f32 cannot tell such rows apart; the host then reads them all in one read-back.) An
        // f16 or bf16 float backend would need a wider margin.
        let rounding = p.dims()[1] as f32 * f32::EPSILON / 2.0;
        if let ProbabilityCheck::SumToOne { tolerance } = policy.check {
            // Values in [0, 1]: near either bound, partial sums stay below 1 + tolerance.
            let slack = rounding * (1.0 + tolerance as f32);
            flags = flags
                + total
                    .clone()
                    .sub_scalar(1.0)
                    .abs()
                    .greater_equal_elem(tolerance as f32 - slack)
                    .float();
        }
        if policy.renormalize && policy.zero_mass == ZeroMass::Refuse {
            flags = flags
                + if matches!(policy.check, ProbabilityCheck::Finite) {
                    // Values of either sign: a sum near zero may round to either side, by up
                    // to the rounding times the sum of magnitudes.
                    let magnitude = p.clone().abs().sum_dim(1);
                    total.lower_equal(magnitude.mul_scalar(rounding)).float()
                } else {
                    // Values of at least zero sum to zero, in f32 too, only when all are zero.
                    total.lower_equal_elem(0.0).float()
                };
        }
        checks.push(Check {
            field: "probabilities",
            flags: flags.reshape([units]),
        });
    }
    checks
}

/// The error for a failed check: the flagged predictions' rows are read back and checked on
/// the host, which names the agent and position. `None` when every flagged row is valid (a
/// finite row whose device sum overflowed).
pub(crate) fn locate_error<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
    check: &Check<B>,
) -> Option<Error> {
    let flags = match read(check.flags.clone()) {
        Ok(flags) => flags,
        Err(error) => return Some(error),
    };
    let mut flagged = flags
        .iter()
        .enumerate()
        .filter(|(_, flag)| **flag > 0.0)
        .map(|(unit, _)| unit);
    if check.field == "probabilities" {
        // Rows near a bound are flagged for the host to decide, possibly all of them: read
        // the [units, K] probabilities once rather than row by row.
        let p = batch.probabilities.as_ref()?;
        let k = batch.modes();
        return match read(p.clone().reshape([p.dims()[0] * k])) {
            Err(error) => Some(error),
            Ok(all) => flagged.find_map(|unit| {
                check_probability_row(&config.probabilities, unit, &all[unit * k..(unit + 1) * k])
                    .err()
            }),
        };
    }
    flagged.find_map(|unit| locate_in_unit(config, batch, check, unit))
}

/// The error in one flagged prediction, if its rows read back invalid.
fn locate_in_unit<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
    check: &Check<B>,
    unit: usize,
) -> Option<Error> {
    let (k, t) = (batch.modes(), batch.steps());
    let per_prediction = config.agents_per_prediction;
    for agent in unit * per_prediction..(unit + 1) * per_prediction {
        let found = match check.field {
            "predictions" => read(
                batch
                    .predictions
                    .clone()
                    .narrow(0, agent, 1)
                    .reshape([k * t * 2]),
            )
            .map(|row| check_finite("predictions", &row, &[k, t, 2], &["mode", "step", ""])),
            "ground_truth" => read(
                batch
                    .ground_truth
                    .clone()
                    .narrow(0, agent, 1)
                    .reshape([t * 2]),
            )
            .map(|row| check_finite("ground_truth", &row, &[t, 2], &["step", ""])),
            "velocity" => read_optional(&batch.velocity, agent, 2)
                .map(|row| check_finite("velocity", &row, &[2], &[""])),
            _ => read_optional(&batch.heading, agent, t)
                .map(|row| check_finite("heading", &row, &[t], &["step"])),
        };
        match found {
            Err(error) => return Some(error),
            Ok(Err(Error::NonFinite {
                field,
                position,
                value,
                ..
            })) => {
                return Some(Error::NonFinite {
                    field,
                    agent,
                    position,
                    value,
                });
            }
            Ok(Err(error)) => return Some(error),
            Ok(Ok(())) => {}
        }
    }
    None
}

fn read_optional<B: Backend>(
    tensor: &Option<Tensor<B, 2>>,
    agent: usize,
    len: usize,
) -> Result<Vec<f32>, Error> {
    match tensor {
        Some(tensor) => read(tensor.clone().narrow(0, agent, 1).reshape([len])),
        None => Ok(Vec::new()),
    }
}

fn read<B: Backend>(tensor: Tensor<B, 1>) -> Result<Vec<f32>, Error> {
    let data = tensor.try_into_data().map_err(|error| Error::Device {
        reason: error.to_string(),
    })?;
    Ok(data.iter::<f32>().collect())
}
