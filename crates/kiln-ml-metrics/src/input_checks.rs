//! Input checks shared by the host and tensor paths, with errors that say where.

use crate::policy::{ProbabilityCheck, ProbabilityPolicy, ZeroMass};
use crate::{Error, Result};

/// Checks that a field has `product(shape)` values.
pub(crate) fn check_len(field: &'static str, len: usize, shape: &[usize]) -> Result<()> {
    // Checked: a wrapped product could match an empty slice and let indexing panic later.
    let expected = shape
        .iter()
        .try_fold(1usize, |product, &dim| product.checked_mul(dim));
    match expected {
        Some(expected) if len == expected => Ok(()),
        Some(expected) => Err(Error::ShapeMismatch {
            field,
            expected: format!("{shape:?} = {expected} values"),
            actual: format!("{len} values"),
        }),
        None => Err(Error::ShapeMismatch {
            field,
            expected: format!("{shape:?}, more values than memory can address"),
            actual: format!("{len} values"),
        }),
    }
}

/// Checks every value is finite; on failure names the row (agent) and the position in it.
///
/// `row_dims` are the dimensions inside one row and `dim_names` their names; an empty name
/// marks the x/y coordinate axis.
pub(crate) fn check_finite(
    field: &'static str,
    values: &[f32],
    row_dims: &[usize],
    dim_names: &[&str],
) -> Result<()> {
    // A branch-free pass vectorizes; the slow search below runs only when it fails.
    let all_finite = values.iter().fold(true, |ok, value| ok & value.is_finite());
    if all_finite {
        return Ok(());
    }
    let Some(index) = values.iter().position(|value| !value.is_finite()) else {
        return Ok(());
    };
    Err(non_finite(field, index, values[index], row_dims, dim_names))
}

/// The error for the non-finite value at flat `index` of a field with rows of `row_dims`.
pub(crate) fn non_finite(
    field: &'static str,
    index: usize,
    value: f32,
    row_dims: &[usize],
    dim_names: &[&str],
) -> Error {
    let row_len: usize = row_dims.iter().product();
    let mut rest = index % row_len;
    let mut parts = Vec::with_capacity(row_dims.len());
    for (position, (&dim, name)) in row_dims.iter().zip(dim_names).enumerate() {
        let inner: usize = row_dims[position + 1..].iter().product();
        let coordinate = rest / inner;
        rest %= inner;
        parts.push(match (*name, dim) {
            ("", 2) => (if coordinate == 0 { "x" } else { "y" }).to_owned(),
            _ => format!("{name} {coordinate}"),
        });
    }
    Error::NonFinite {
        field,
        agent: index / row_len,
        position: parts.join(", "),
        value,
    }
}

/// Checks one prediction's probability row against the policy.
pub(crate) fn check_probability_row(
    policy: &ProbabilityPolicy,
    prediction: usize,
    row: &[f32],
) -> Result<()> {
    let (low_ok, allowed): (fn(f32) -> bool, _) = match policy.check {
        ProbabilityCheck::Finite => (|_| true, "finite"),
        ProbabilityCheck::NonNegative => (|p| p >= 0.0, "[0, inf)"),
        ProbabilityCheck::UnitInterval | ProbabilityCheck::SumToOne { .. } => {
            (|p| (0.0..=1.0).contains(&p), "[0, 1]")
        }
    };
    for (mode, &value) in row.iter().enumerate() {
        if !value.is_finite() {
            return Err(Error::NonFinite {
                field: "probabilities",
                agent: prediction,
                position: format!("mode {mode}"),
                value,
            });
        }
        if !low_ok(value) {
            return Err(Error::ProbabilityOutOfRange {
                prediction,
                mode,
                value,
                allowed,
            });
        }
    }
    let sum: f64 = row.iter().map(|&p| f64::from(p)).sum();
    if let ProbabilityCheck::SumToOne { tolerance } = policy.check
        && (sum - 1.0).abs() > tolerance
    {
        return Err(Error::ProbabilitiesNotNormalized {
            prediction,
            sum,
            tolerance,
        });
    }
    if policy.renormalize && policy.zero_mass == ZeroMass::Refuse && sum <= 0.0 {
        return Err(Error::ProbabilitiesSumToZero { prediction });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_are_located() {
        let mut values = vec![0.0f32; 2 * 3 * 4 * 2];
        values[3 * 4 * 2 + 2 * 4 * 2 + 3 * 2 + 1] = f32::INFINITY;
        let error = check_finite("predictions", &values, &[3, 4, 2], &["mode", "step", ""]);
        assert_eq!(
            error,
            Err(Error::NonFinite {
                field: "predictions",
                agent: 1,
                position: "mode 2, step 3, y".into(),
                value: f32::INFINITY,
            })
        );
        assert!(check_finite("x", &[1.0, 2.0], &[2], &[""]).is_ok());
    }

    #[test]
    fn probability_rows_follow_the_policy() {
        let policy = |check| ProbabilityPolicy {
            check,
            renormalize: true,
            low_probability_floor: 0.05,
            zero_mass: ZeroMass::Refuse,
        };
        let unit = policy(ProbabilityCheck::UnitInterval);
        assert!(matches!(
            check_probability_row(&unit, 4, &[0.5, 1.5]),
            Err(Error::ProbabilityOutOfRange {
                prediction: 4,
                mode: 1,
                ..
            })
        ));
        let scores = policy(ProbabilityCheck::NonNegative);
        assert!(check_probability_row(&scores, 0, &[3.0, 1.5]).is_ok());
        assert_eq!(
            check_probability_row(&scores, 2, &[0.0, 0.0]),
            Err(Error::ProbabilitiesSumToZero { prediction: 2 })
        );
        let finite = policy(ProbabilityCheck::Finite);
        assert!(check_probability_row(&finite, 0, &[3.0, -1.5]).is_ok());
        assert!(matches!(
            check_probability_row(&finite, 3, &[-3.0, f32::NAN]),
            Err(Error::NonFinite { agent: 3, .. })
        ));
        assert_eq!(
            check_probability_row(&finite, 2, &[0.5, -1.0]),
            Err(Error::ProbabilitiesSumToZero { prediction: 2 })
        );
        let normalized = policy(ProbabilityCheck::SumToOne { tolerance: 1e-5 });
        assert!(matches!(
            check_probability_row(&normalized, 1, &[0.5, 0.4]),
            Err(Error::ProbabilitiesNotNormalized { prediction: 1, .. })
        ));
        assert!(check_probability_row(&normalized, 1, &[0.5, 0.5]).is_ok());
    }
}
