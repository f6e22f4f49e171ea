//! Side-by-side timing for benchmarks on a shared, noisy machine: rounds of each variant in a
//! rotating order, so load from other processes hits all variants alike.

use std::time::Instant;

/// Warms each variant up with 3 steps, then runs `rounds` rounds of `steps` steps of every
/// variant, rotating the order each round so no variant always runs right after another.
/// Returns, per variant, its seconds per step in each round.
pub fn interleaved<V>(
    variants: &mut [V],
    mut step: impl FnMut(&mut V) -> f64,
    rounds: usize,
    steps: usize,
) -> Vec<Vec<f64>> {
    for variant in variants.iter_mut() {
        for _ in 0..3 {
            step(variant);
        }
    }
    let count = variants.len();
    let mut seconds = vec![Vec::with_capacity(rounds); count];
    for round in 0..rounds {
        for offset in 0..count {
            let index = (round + offset) % count;
            let started = Instant::now();
            for _ in 0..steps {
                std::hint::black_box(step(&mut variants[index]));
            }
            seconds[index].push(started.elapsed().as_secs_f64() / steps as f64);
        }
    }
    seconds
}

/// The median of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median of the per-round ratios of `ours` to `baseline`.
pub fn median_ratio(ours: &[f64], baseline: &[f64]) -> f64 {
    median(ours.iter().zip(baseline).map(|(a, b)| a / b).collect())
}
