//! The measures of one stretch of an order, computed from the group (file) of each position.

use super::spearman::spearman;

/// The same-file rate at one lag.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LagRate {
    /// The lag k, in positions.
    pub lag: usize,
    /// r(k): the share of positions t with f(s_t) = f(s_{t+k}); `None` when the stretch is not
    /// longer than k.
    pub rate: Option<f64>,
}

/// Shuffle-quality measures of one stretch of an order (data.md §3, metrics 1–5).
///
/// Batch measures use the stretch's full batches of B positions; a trailing partial batch is
/// left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OrderStats {
    /// Positions in the stretch.
    pub positions: usize,
    /// Full batches measured.
    pub batches: usize,
    /// Mean number of distinct files per batch, D.
    pub distinct_files_per_batch: f64,
    /// 5th percentile (nearest rank) of distinct files per batch.
    pub distinct_files_per_batch_p5: f64,
    /// P_same: the share of ordered pairs of positions in a batch that hold the same file,
    /// `Σ_b Σ_f c_bf (c_bf − 1) / (batches · B (B − 1))`.
    pub same_file_pair_rate: f64,
    /// Mean over batches of the entropy, in bits, of the batch's file histogram.
    pub batch_file_entropy_bits: f64,
    /// Lag-k same-file rates r(k) for the requested lags.
    pub lag_same_file_rate: Vec<LagRate>,
    /// Smallest power-of-two lag k with r(k) below twice the ideal rate, if any up to half the
    /// stretch: how far apart two positions must be to look independent.
    pub decorrelation_lag: Option<usize>,
    /// Spearman correlation of plan position against original position (sample id).
    pub spearman: f64,
}

/// Measures one stretch. `groups[t]` is the file of position t; `samples[t]` its sample id;
/// `group_count` bounds the group ids; `ideal_pair_rate` is P* (for the decorrelation lag).
pub(crate) fn order_stats(
    groups: &[u32],
    samples: &[u64],
    group_count: usize,
    batch_size: usize,
    lags: &[usize],
    ideal_pair_rate: f64,
) -> OrderStats {
    let batches = groups.len() / batch_size;
    let mut counts = vec![0u32; group_count];
    let mut touched: Vec<u32> = Vec::with_capacity(batch_size);
    let mut distinct = Vec::with_capacity(batches);
    let mut pairs = 0u64;
    let mut entropy_sum = 0.0;
    for batch in groups[..batches * batch_size].chunks_exact(batch_size) {
        for &group in batch {
            let count = &mut counts[group as usize];
            if *count == 0 {
                touched.push(group);
            }
            *count += 1;
        }
        distinct.push(touched.len() as f64);
        let mut entropy = 0.0;
        for &group in &touched {
            let count = std::mem::take(&mut counts[group as usize]);
            pairs += u64::from(count) * u64::from(count - 1);
            let share = f64::from(count) / batch_size as f64;
            entropy -= share * share.log2();
        }
        entropy_sum += entropy;
        touched.clear();
    }
    let mean_distinct = distinct.iter().sum::<f64>() / batches as f64;
    distinct.sort_by(f64::total_cmp);
    // Nearest-rank percentile: the smallest value with at least 5% of batches at or below it.
    let p5_index = (batches * 5).div_ceil(100).saturating_sub(1);
    let pair_denominator = batches as f64 * batch_size as f64 * (batch_size as f64 - 1.0);
    OrderStats {
        positions: groups.len(),
        batches,
        distinct_files_per_batch: mean_distinct,
        distinct_files_per_batch_p5: distinct.get(p5_index).copied().unwrap_or(f64::NAN),
        same_file_pair_rate: pairs as f64 / pair_denominator,
        batch_file_entropy_bits: entropy_sum / batches as f64,
        lag_same_file_rate: lags
            .iter()
            .map(|&lag| LagRate {
                lag,
                rate: lag_rate(groups, lag),
            })
            .collect(),
        decorrelation_lag: decorrelation_lag(groups, ideal_pair_rate),
        spearman: spearman(samples),
    }
}

/// r(k) = (1 / (n − k)) Σ_t 1[g_t = g_{t+k}], or `None` when n ≤ k.
pub(crate) fn lag_rate(groups: &[u32], lag: usize) -> Option<f64> {
    if groups.len() <= lag {
        return None;
    }
    let same = groups
        .iter()
        .zip(&groups[lag..])
        .filter(|(a, b)| a == b)
        .count();
    Some(same as f64 / (groups.len() - lag) as f64)
}

fn decorrelation_lag(groups: &[u32], ideal_pair_rate: f64) -> Option<usize> {
    let mut lag = 1;
    while lag <= groups.len() / 2 {
        if lag_rate(groups, lag).is_some_and(|rate| rate < 2.0 * ideal_pair_rate) {
            return Some(lag);
        }
        lag *= 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERANCE: f64 = 1e-12;

    #[test]
    fn batch_measures_match_hand_counts() {
        // Two batches of 4: files [0,0,1,2] and [3,3,3,3]; a trailing partial batch [1].
        let groups = [0, 0, 1, 2, 3, 3, 3, 3, 1];
        let samples: Vec<u64> = (0..9).collect();
        let stats = order_stats(&groups, &samples, 4, 4, &[1, 4, 20], 0.25);
        assert_eq!(stats.batches, 2);
        assert!((stats.distinct_files_per_batch - 2.0).abs() < TOLERANCE);
        assert!((stats.distinct_files_per_batch_p5 - 1.0).abs() < TOLERANCE);
        // Pairs: batch 1 has 2·1 = 2, batch 2 has 4·3 = 12; over 2 · 4 · 3 = 24.
        assert!((stats.same_file_pair_rate - 14.0 / 24.0).abs() < TOLERANCE);
        // Entropies: 1.5 bits and 0 bits.
        assert!((stats.batch_file_entropy_bits - 0.75).abs() < TOLERANCE);
        // Lag 1: equal neighbours (0,0), (3,3) x3 = 4 of 8.
        assert_eq!(stats.lag_same_file_rate[0].rate, Some(0.5));
        // Lag 4: (0,3) (0,3) (1,3) (2,3) (3,1) = 0 of 5.
        assert_eq!(stats.lag_same_file_rate[1].rate, Some(0.0));
        assert_eq!(stats.lag_same_file_rate[2].rate, None);
        // Lag 2: (3,3) twice in 7 pairs = 0.29 < 2 · 0.25.
        assert_eq!(stats.decorrelation_lag, Some(2));
        assert!((stats.spearman - 1.0).abs() < TOLERANCE);
    }

    #[test]
    fn a_single_run_never_decorrelates() {
        // As if the layout had many files but the order stays in one of them.
        let groups = [0u32; 64];
        let samples: Vec<u64> = (0..64).rev().collect();
        let stats = order_stats(&groups, &samples, 1, 8, &[1], 0.01);
        assert_eq!(stats.decorrelation_lag, None);
        assert!((stats.same_file_pair_rate - 1.0).abs() < TOLERANCE);
        assert!((stats.spearman + 1.0).abs() < TOLERANCE);
    }
}
