//! What a uniform random permutation would score: closed forms where they exist, Monte Carlo
//! otherwise.

use std::collections::HashSet;

use crate::rng::{PlanRng, Purpose};

/// The measures of a uniformly random permutation of the same samples (the ideal), for the
/// same batch size and grouping.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IdealStats {
    /// E\[D\] = Σ_f [1 − C(N − n_f, B) / C(N, B)], exact.
    pub distinct_files_per_batch: f64,
    /// 5th percentile of D, Monte Carlo.
    pub distinct_files_per_batch_p5: f64,
    /// P* = Σ_f n_f (n_f − 1) / (N (N − 1)), exact; also the ideal lag-k rate for every k ≥ 1.
    pub same_file_pair_rate: f64,
    /// Mean batch file entropy in bits, Monte Carlo.
    pub batch_file_entropy_bits: f64,
    /// Standard error of the Monte Carlo entropy mean.
    pub batch_file_entropy_bits_standard_error: f64,
    /// Standard deviation of Spearman's ρ under the null, 1 / √(n − 1) for a stretch of n
    /// positions (the ideal ρ itself is 0).
    pub spearman_sd: f64,
}

impl IdealStats {
    /// The ideal for a stretch of `positions` positions: only the Spearman spread depends on it.
    pub(crate) fn for_positions(&self, positions: usize) -> Self {
        Self {
            spearman_sd: 1.0 / ((positions as f64) - 1.0).sqrt(),
            ..self.clone()
        }
    }
}

/// The ideal values for groups of the given sizes (`sizes[f] = n_f`), batches of `batch_size`.
pub(crate) fn ideal_stats(
    sizes: &[u64],
    batch_size: usize,
    monte_carlo_batches: usize,
    seed: u64,
) -> IdealStats {
    let total: u64 = sizes.iter().sum();
    let (p5, entropy_mean, entropy_error) =
        monte_carlo(sizes, total, batch_size, monte_carlo_batches, seed);
    IdealStats {
        distinct_files_per_batch: expected_distinct(sizes, total, batch_size),
        distinct_files_per_batch_p5: p5,
        same_file_pair_rate: pair_rate(sizes, total),
        batch_file_entropy_bits: entropy_mean,
        batch_file_entropy_bits_standard_error: entropy_error,
        spearman_sd: 1.0 / ((total as f64) - 1.0).sqrt(),
    }
}

/// E\[D\] for B draws without replacement: Σ_f [1 − Π_{i<B} (N − n_f − i) / (N − i)].
pub(crate) fn expected_distinct(sizes: &[u64], total: u64, batch_size: usize) -> f64 {
    let n = total as f64;
    sizes
        .iter()
        .filter(|&&size| size > 0)
        .map(|&size| {
            let mut none_drawn = 1.0;
            for drawn in 0..batch_size as u64 {
                if size + drawn >= total {
                    none_drawn = 0.0;
                    break;
                }
                none_drawn *= (n - size as f64 - drawn as f64) / (n - drawn as f64);
            }
            1.0 - none_drawn
        })
        .sum()
}

/// P* = Σ_f n_f (n_f − 1) / (N (N − 1)).
pub(crate) fn pair_rate(sizes: &[u64], total: u64) -> f64 {
    let same: f64 = sizes
        .iter()
        .map(|&size| size as f64 * (size as f64 - 1.0).max(0.0))
        .sum();
    same / (total as f64 * (total as f64 - 1.0))
}

/// Draws batches of B distinct positions of a uniform permutation; returns the 5th percentile
/// of D, the mean batch entropy and its standard error.
fn monte_carlo(
    sizes: &[u64],
    total: u64,
    batch_size: usize,
    batches: usize,
    seed: u64,
) -> (f64, f64, f64) {
    let mut rng = PlanRng::new(seed, 0, Purpose::MonteCarlo);
    let mut ends = Vec::with_capacity(sizes.len());
    let mut running = 0;
    for &size in sizes {
        running += size;
        ends.push(running);
    }
    if batch_size as u64 > total {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut positions: HashSet<u64> = HashSet::with_capacity(batch_size);
    let mut groups: Vec<usize> = Vec::with_capacity(batch_size);
    let mut distinct = Vec::with_capacity(batches);
    let mut entropies = Vec::with_capacity(batches);
    for _ in 0..batches {
        // Floyd's algorithm: B distinct positions in 0..N with B draws.
        positions.clear();
        for upper in (total - batch_size as u64)..total {
            let pick = rng.below(upper + 1);
            let chosen = if positions.contains(&pick) {
                upper
            } else {
                pick
            };
            positions.insert(chosen);
        }
        groups.clear();
        groups.extend(
            positions
                .iter()
                .map(|&p| ends.partition_point(|&end| end <= p)),
        );
        groups.sort_unstable();
        let mut entropy = 0.0;
        let mut count_distinct = 0;
        for run in groups.chunk_by(|a, b| a == b) {
            count_distinct += 1;
            let share = run.len() as f64 / batch_size as f64;
            entropy -= share * share.log2();
        }
        distinct.push(count_distinct as f64);
        entropies.push(entropy);
    }
    distinct.sort_by(f64::total_cmp);
    let p5 = distinct[(batches * 5).div_ceil(100).saturating_sub(1)];
    let mean = entropies.iter().sum::<f64>() / batches as f64;
    let variance = entropies
        .iter()
        .map(|e| (e - mean) * (e - mean))
        .sum::<f64>()
        / (batches as f64 - 1.0);
    (p5, mean, (variance / batches as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_files_match_the_reference_values() {
        // data.md §3: N = 900,000, F = 660 equal files, B = 64: E[D] = 61.1, H = 5.91 bits,
        // P* = 0.00151, SD(ρ) = 0.00105. Exact E[D] with big-integer binomials (Python's
        // math.comb) is 61.040967; 20,000 Monte Carlo batches in Python gave H = 5.9068.
        let mut sizes = vec![1363u64; 660];
        for size in sizes.iter_mut().take(900_000 - 1363 * 660) {
            *size += 1;
        }
        let ideal = ideal_stats(&sizes, 64, 4000, 0);
        assert!(
            (ideal.distinct_files_per_batch - 61.040_967).abs() < 1e-5,
            "{ideal:?}"
        );
        assert!(
            (ideal.same_file_pair_rate - 0.00151).abs() < 0.000_005,
            "{ideal:?}"
        );
        assert!(
            (ideal.batch_file_entropy_bits - 5.9068).abs() < 0.005,
            "{ideal:?}"
        );
        assert!(ideal.batch_file_entropy_bits_standard_error < 0.005);
        assert!((ideal.spearman_sd - 0.00105).abs() < 0.000_005);
        assert!(ideal.distinct_files_per_batch_p5 <= ideal.distinct_files_per_batch);
        assert!(ideal.distinct_files_per_batch_p5 >= 57.0, "{ideal:?}");
    }

    #[test]
    fn exact_values_for_tiny_cases() {
        // Two files of 2: a batch of 2 holds the same file with probability 2·2·1 / (4·3) = 1/3.
        assert!((pair_rate(&[2, 2], 4) - 1.0 / 3.0).abs() < 1e-12);
        // E[D] = 2 − 2 · P(both from the other file) = 2 − 2 · (2/4 · 1/3) = 5/3.
        assert!((expected_distinct(&[2, 2], 4, 2) - 5.0 / 3.0).abs() < 1e-12);
        // A batch as large as the data sees every file.
        assert!((expected_distinct(&[3, 1, 0, 2], 6, 6) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn monte_carlo_gets_the_degenerate_layouts_exactly() {
        // One file: every batch has one file and zero entropy.
        let (p5, entropy, error) = monte_carlo(&[50], 50, 10, 100, 1);
        assert_eq!((p5, entropy, error), (1.0, 0.0, 0.0));
        // Each sample its own file: every batch has B files and log2(B) bits.
        let (p5, entropy, _) = monte_carlo(&[1; 100], 100, 8, 100, 1);
        assert_eq!(p5, 8.0);
        assert!((entropy - 3.0).abs() < 1e-12);
    }
}
