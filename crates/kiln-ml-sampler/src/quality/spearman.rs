//! Spearman rank correlation of plan position against original position.

/// Spearman's ρ between position `t` and `values[t]`: the Pearson correlation of their ranks,
/// with tied values sharing their average rank. `NaN` for fewer than two values or when all
/// values are equal.
pub(crate) fn spearman(values: &[u64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return f64::NAN;
    }
    let mut by_value: Vec<(u64, usize)> = values.iter().copied().zip(0..).collect();
    by_value.sort_unstable();
    let mut ranks = vec![0.0f64; n];
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && by_value[end].0 == by_value[start].0 {
            end += 1;
        }
        // Ranks start..end share their mean.
        let rank = (start + end - 1) as f64 / 2.0;
        for &(_, position) in &by_value[start..end] {
            ranks[position] = rank;
        }
        start = end;
    }
    let mean = (n - 1) as f64 / 2.0;
    let (mut covariance, mut position_square, mut value_square) = (0.0, 0.0, 0.0);
    for (position, &rank) in ranks.iter().enumerate() {
        let dt = position as f64 - mean;
        let dv = rank - mean;
        covariance += dt * dv;
        position_square += dt * dt;
        value_square += dv * dv;
    }
    covariance / (position_square * value_square).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERANCE: f64 = 1e-12;

    #[test]
    fn monotone_orders_give_plus_and_minus_one() {
        assert!((spearman(&[3, 10, 11, 40]) - 1.0).abs() < TOLERANCE);
        assert!((spearman(&[9, 7, 2, 0]) + 1.0).abs() < TOLERANCE);
        assert!(spearman(&[5]).is_nan());
        assert!(spearman(&[5, 5, 5]).is_nan());
    }

    #[test]
    fn matches_the_textbook_formula_without_ties() {
        // ρ = 1 − 6 Σ d² / (n (n² − 1)); ranks of [2, 0, 3, 1, 4] differ from 0..5 by
        // d = (2, -1, 1, -2, 0): Σ d² = 10, so ρ = 1 − 60 / 120 = 0.5.
        assert!((spearman(&[2, 0, 3, 1, 4]) - 0.5).abs() < TOLERANCE);
    }

    #[test]
    fn ties_share_their_average_rank() {
        // Values [1, 1, 2]: ranks [0.5, 0.5, 2]; Pearson with [0, 1, 2] is sqrt(3)/2.
        let expected = 3f64.sqrt() / 2.0;
        assert!((spearman(&[1, 1, 2]) - expected).abs() < TOLERANCE);
    }
}
