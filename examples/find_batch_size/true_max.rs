//! The true maximum batch size, established apart from the finder's search, and what each
//! search mode promises against it.

use anyhow::bail;
use kiln_ml::profile::FinderMode;
use kiln_ml::profile::{FinderReport, Trial};

/// The largest size that fits, found apart from the finder's search: the growth of memory
/// with the batch is measured at two sizes, the predicted limit is bracketed by trials and
/// bisected, and the answer is confirmed by trials at `max` (fits) and `max + 1` (does not).
pub fn true_maximum(
    cap: usize,
    budget: u64,
    mut check: impl FnMut(usize) -> kiln_ml::profile::Result<Trial>,
) -> anyhow::Result<(Option<usize>, Vec<Trial>)> {
    let mut trials = Vec::new();
    let mut run = |size: usize, trials: &mut Vec<Trial>| -> anyhow::Result<bool> {
        let trial = check(size)?;
        let fits = trial.fits;
        trials.push(trial);
        Ok(fits)
    };
    let (small, large) = (16.min(cap), 64.min(cap));
    if small == large {
        // Too small a dataset to measure growth: bisect the whole range.
        run(small, &mut trials)?;
    } else {
        run(small, &mut trials)?;
        run(large, &mut trials)?;
    }
    let peak = |trial: &Trial| trial.peak_bytes.unwrap_or(0) as f64;
    let (peak_small, peak_large) = (peak(&trials[0]), peak(&trials[trials.len() - 1]));
    // Memory is close to affine in the batch size: predict where it meets the budget.
    let predicted =
        if large > small && trials.iter().all(|trial| trial.fits) && peak_large > peak_small {
            let per_sample = (peak_large - peak_small) / (large - small) as f64;
            let fixed = peak_small - per_sample * small as f64;
            (((budget as f64 - fixed) / per_sample).floor() as usize).clamp(1, cap)
        } else {
            small
        };
    // Bracket: grow from the prediction until a size does not fit (or the cap fits).
    let mut low = 0usize;
    let mut high = None;
    let mut size = predicted.max(1);
    while high.is_none() {
        if run(size, &mut trials)? {
            low = size;
            if size >= cap {
                return Ok((Some(cap), trials));
            }
            size = (size * 2).min(cap);
        } else {
            high = Some(size);
        }
    }
    let mut high = high.unwrap_or(cap + 1);
    if low == 0 {
        // Even the prediction was too large: bracket from below.
        while high > 1 {
            let half = high / 2;
            if run(half, &mut trials)? {
                low = half;
                break;
            }
            high = half;
        }
        if low == 0 {
            return Ok((None, trials));
        }
    }
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if run(middle, &mut trials)? {
            low = middle;
        } else {
            high = middle;
        }
    }
    // Confirm the boundary with a fresh pair of trials.
    if !run(low, &mut trials)? || run(low + 1, &mut trials)? {
        bail!(
            "memory is not monotone in the batch size around {low}: the true maximum is not \
             well defined (trials: {:?})",
            trials
                .iter()
                .map(|trial| (trial.batch_size, trial.fits))
                .collect::<Vec<_>>()
        );
    }
    Ok((Some(low), trials))
}

/// Whether `search` found what its mode promises: never above the true maximum, and at most its
/// tolerance below it (binsearch: the margin; power: a power of two above half of it; shrink:
/// one shrink step, a factor 0.9).
pub fn within_tolerance(search: &FinderReport, true_max: usize) -> bool {
    let floor = match search.mode {
        FinderMode::BinSearch => (true_max as f64 * (1.0 - search.margin)).floor() as usize,
        FinderMode::Power => true_max / 2 + 1,
        FinderMode::Shrink => (true_max as f64 * 0.9).floor() as usize,
    };
    search.found <= true_max && search.found >= floor.max(1)
}

/// The tolerance of [`within_tolerance`], in words.
pub fn tolerance_text(mode: FinderMode) -> &'static str {
    match mode {
        FinderMode::BinSearch => "the 5% margin",
        FinderMode::Power => "above half",
        FinderMode::Shrink => "one 0.9 step",
    }
}
