//! Comparing two runs' numbers, where a NaN anywhere must show: `f64::max` drops a NaN, so a
//! diverged run would read as "no difference" and pass a parity check.

/// The largest of `values`, NaN when any is NaN (0 when there are none).
pub fn worst(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0.0, |most, value| {
        if most.is_nan() || value.is_nan() {
            f64::NAN
        } else {
            most.max(value)
        }
    })
}

/// The largest `|left[i] - right[i]|`, NaN when either holds a NaN, infinite when their lengths
/// differ.
pub fn max_abs_diff(left: &[f32], right: &[f32]) -> f64 {
    if left.len() != right.len() {
        return f64::INFINITY;
    }
    worst(
        left.iter()
            .zip(right)
            .map(|(a, b)| f64::from((a - b).abs())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_is_the_largest_difference() {
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.5, 2.0]), 0.5);
        assert!(max_abs_diff(&[1.0, f32::NAN], &[1.0, 2.0]).is_nan());
        assert!(worst([0.1, f64::NAN, 0.2]).is_nan());
        assert_eq!(worst([]), 0.0);
        assert_eq!(max_abs_diff(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }
}
