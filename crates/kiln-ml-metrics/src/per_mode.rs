//! Per-hypothesis building blocks for one agent, like `av2`'s `compute_ade`, `compute_fde`
//! and `compute_brier_*` and nuScenes' `mean_distances`/`max_distances`.
//!
//! They return one value per mode and leave selection and aggregation to the caller; the
//! streaming metrics in [`TrajectoryMetrics`](crate::TrajectoryMetrics) do not use them.

use crate::input_checks::{check_finite, check_len, non_finite};
use crate::{Error, Result};

/// The displacement errors of one hypothesis, in meters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeErrors {
    /// Mean displacement over the steps (ADE).
    pub ade_m: f64,
    /// Displacement at the last step (FDE).
    pub fde_m: f64,
    /// Largest displacement over the steps.
    pub max_m: f64,
}

/// ADE, FDE and the largest displacement of each of `modes` forecasts `[K, T, 2]` against the
/// ground truth `[T, 2]`, computed in `f64`.
///
/// ```
/// use kiln_ml_metrics::per_mode::mode_errors;
///
/// // av2's "straight" case: forecast (t, 0) against a track parked at the origin.
/// let forecast: Vec<f32> = (0..10).flat_map(|t| [t as f32, 0.0]).collect();
/// let errors = mode_errors(&forecast, &[0.0; 20], 1)?;
/// assert_eq!((errors[0].ade_m, errors[0].fde_m), (4.5, 9.0));
/// # Ok::<(), kiln_ml_metrics::Error>(())
/// ```
pub fn mode_errors(
    forecasts: &[f32],
    ground_truth: &[f32],
    modes: usize,
) -> Result<Vec<ModeErrors>> {
    if modes == 0 {
        return Err(Error::NoModes);
    }
    let steps = ground_truth.len() / 2;
    if steps == 0 {
        return Err(Error::NoSteps);
    }
    check_len("ground_truth", ground_truth.len(), &[steps, 2])?;
    check_len("forecasts", forecasts.len(), &[modes, steps, 2])?;
    check_finite(
        "forecasts",
        forecasts,
        &[modes, steps, 2],
        &["mode", "step", ""],
    )?;
    check_finite("ground_truth", ground_truth, &[steps, 2], &["step", ""])?;
    Ok(forecasts
        .chunks_exact(steps * 2)
        .map(|forecast| {
            let distances: Vec<f64> = forecast
                .chunks_exact(2)
                .zip(ground_truth.chunks_exact(2))
                .map(|(f, g)| {
                    let dx = f64::from(f[0]) - f64::from(g[0]);
                    let dy = f64::from(f[1]) - f64::from(g[1]);
                    dx.hypot(dy)
                })
                .collect();
            ModeErrors {
                ade_m: distances.iter().sum::<f64>() / steps as f64,
                fde_m: distances[steps - 1],
                max_m: distances.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect())
}

/// `errors[k] + (1 - p[k])^2` for each mode: av2's `compute_brier_ade`/`compute_brier_fde`.
///
/// Like av2, probabilities must be one per mode and each in [0, 1] **before** normalizing;
/// `normalize` then divides them by their sum.
pub fn brier_scores(errors: &[f64], probabilities: &[f32], normalize: bool) -> Result<Vec<f64>> {
    if probabilities.len() != errors.len() {
        return Err(Error::ShapeMismatch {
            field: "probabilities",
            expected: format!("{} values (one per mode)", errors.len()),
            actual: format!("{} values", probabilities.len()),
        });
    }
    if let Some(mode) = errors.iter().position(|error| !error.is_finite()) {
        let value = errors[mode] as f32;
        return Err(non_finite(
            "errors",
            mode,
            value,
            &[errors.len()],
            &["mode"],
        ));
    }
    check_finite(
        "probabilities",
        probabilities,
        &[probabilities.len()],
        &["mode"],
    )?;
    for (mode, &value) in probabilities.iter().enumerate() {
        if !(0.0..=1.0).contains(&value) {
            return Err(Error::ProbabilityOutOfRange {
                prediction: 0,
                mode,
                value,
                allowed: "[0, 1]",
            });
        }
    }
    let total: f64 = probabilities.iter().map(|&p| f64::from(p)).sum();
    if normalize && total <= 0.0 {
        return Err(Error::ProbabilitiesSumToZero { prediction: 0 });
    }
    Ok(errors
        .iter()
        .zip(probabilities)
        .map(|(error, &p)| {
            let p = if normalize {
                f64::from(p) / total
            } else {
                f64::from(p)
            };
            error + (1.0 - p).powi(2)
        })
        .collect())
}
