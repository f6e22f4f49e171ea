//! Running and timing epochs.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_ml::core::{BlockLayout, BlockSource, Plan};
use kiln_ml::data::{Collate, Loader};

/// A progress bar on standard error (indicatif hides it when that is not a terminal).
pub fn progress(len: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len).with_message(message);
    if let Ok(style) = ProgressStyle::with_template("{msg:>28} {wide_bar} {pos}/{len} ({eta})") {
        bar.set_style(style);
    }
    bar
}

/// How long an epoch took.
#[derive(Debug, Clone, Copy)]
pub struct EpochTime {
    /// From the start to the last batch.
    pub seconds: f64,
    /// From the start to the first batch: what the consumer waits before it can begin.
    pub first_batch_seconds: f64,
}

/// Runs one epoch of `plan`, passing every batch to `consume`.
pub fn run_epoch<S, C>(
    loader: &Loader<S, C>,
    plan: Plan,
    message: &'static str,
    mut consume: impl FnMut(C::Output),
) -> Result<EpochTime>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    let batches = plan.batch_count();
    let bar = progress(batches, message);
    let started = Instant::now();
    let mut first_batch_seconds = None;
    for batch in loader.epoch(plan)? {
        first_batch_seconds.get_or_insert_with(|| started.elapsed().as_secs_f64());
        consume(batch?);
        bar.inc(1);
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(EpochTime {
        seconds,
        first_batch_seconds: first_batch_seconds.unwrap_or(seconds),
    })
}

/// Epochs per chain of back-to-back epochs.
pub const CHAIN_EPOCHS: u64 = 3;

/// Runs plans back to back, each epoch announcing the next (`Epoch::prefetch_next`); returns
/// the seconds of each epoch, from the end of the previous one (the first from its start).
pub fn run_chain<S, C>(
    loader: &Loader<S, C>,
    plans: Vec<Plan>,
    message: &'static str,
) -> Result<Vec<f64>>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    let batches = plans.iter().map(Plan::batch_count).sum();
    let bar = progress(batches, message);
    let mut plans = plans.into_iter();
    let mut seconds = Vec::new();
    let mut started = Instant::now();
    let mut epoch = loader.epoch(plans.next().context("an empty chain")?)?;
    loop {
        if let Some(next) = plans.next() {
            epoch.prefetch_next(next);
        }
        for batch in &mut epoch {
            black_box(batch?);
            bar.inc(1);
        }
        seconds.push(started.elapsed().as_secs_f64());
        started = Instant::now();
        match epoch.into_next() {
            Some(next) => epoch = next?,
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok(seconds)
}

/// The median (the upper one for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
