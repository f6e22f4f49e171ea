//! One epoch through kiln-ml-data's `Loader`, its batches padded to their longest event, and
//! what it cost: rows per second, padded and real elements, the largest batch.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Result, bail};
use kiln_ml::core::Plan;
use kiln_ml::data::arrow_array::RecordBatch;
use kiln_ml::data::arrow_array::types::Int64Type;
use kiln_ml::data::{
    ArrowRow, Collate, Loader, ParquetSource, columnar_fn, padded_list, required_values,
};

use kiln_ml_examples::timing::progress;

/// A delivered batch: its events' ids and their pulses padded to the longest, with a mask.
pub struct PaddedBatch {
    /// The events' `event_id`s (their sample ids), in batch order.
    pub ids: Vec<i64>,
    /// The pulses, `[rows, longest, 4]`, and the mask `[rows, longest]`.
    pub pulses: kiln_ml::data::PaddedSequences,
}

/// The collation: the gathered columns' ids, and the pulses padded with zeros.
pub fn padded_collate() -> impl Collate<ArrowRow, Output = PaddedBatch> + 'static {
    columnar_fn(|columns: RecordBatch| PaddedBatch {
        ids: required_values::<Int64Type>(&columns, "event_id")
            .expect("the events' int64 event_id column")
            .to_vec(),
        pulses: padded_list(&columns, "pulses", 0.0).expect("the events' pulses list column"),
    })
}

/// What one epoch delivered and cost.
#[derive(Debug, Clone, Default)]
pub struct EpochFigures {
    /// From the start of the epoch to its last batch.
    pub seconds: f64,
    /// Events delivered.
    pub rows: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Pulses delivered (the batches' real elements).
    pub real_elements: u64,
    /// `rows × longest` summed over batches: what padded tensors hold.
    pub padded_elements: u64,
    /// The largest batch's `rows × longest`.
    pub peak_batch_elements: u64,
    /// Whether every batch held the plan's events for it, in the plan's order.
    pub matches_plan: bool,
    /// Whether every event of the dataset was delivered exactly once.
    pub every_sample_once: bool,
}

impl EpochFigures {
    /// Events per second.
    pub fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.seconds
    }

    /// Padding over real elements.
    pub fn padding_waste(&self) -> f64 {
        (self.padded_elements - self.real_elements) as f64 / self.real_elements.max(1) as f64
    }
}

/// Runs `plan` to its end and checks the batches: each the plan's, cut where it cuts them, and
/// every one of the dataset's `events` delivered exactly once (the plans here cover it once).
pub fn run_epoch(
    loader: &Loader<ParquetSource, impl Collate<ArrowRow, Output = PaddedBatch> + 'static>,
    plan: Plan,
    events: u64,
    message: &'static str,
) -> Result<EpochFigures> {
    let bar = progress(plan.batch_count(), message);
    let expected: Vec<std::ops::Range<u64>> = (0..plan.batch_count())
        .map(|batch| plan.batch_range(batch))
        .collect();
    let order = plan.order().to_vec();
    let mut figures = EpochFigures {
        matches_plan: true,
        ..EpochFigures::default()
    };
    let mut delivered = vec![0u8; events as usize];
    let started = Instant::now();
    let mut epoch = loader.epoch(plan)?;
    for (batch, range) in epoch.by_ref().zip(expected) {
        let batch = batch?;
        let planned = &order[range.start as usize..range.end as usize];
        figures.matches_plan &= batch.ids.len() == planned.len()
            && batch
                .ids
                .iter()
                .zip(planned)
                .all(|(&id, &sample)| id as u64 == sample);
        for &id in &batch.ids {
            match delivered.get_mut(id as usize) {
                Some(count) => *count = count.saturating_add(1),
                None => bail!("{message}: event {id} is not in the dataset of {events}"),
            }
        }
        let padded = &batch.pulses;
        let rows = padded.rows() as u64;
        let padded_elements = rows * padded.longest as u64;
        figures.rows += rows;
        figures.batches += 1;
        figures.real_elements += padded.lengths.iter().sum::<usize>() as u64;
        figures.padded_elements += padded_elements;
        figures.peak_batch_elements = figures.peak_batch_elements.max(padded_elements);
        black_box(batch);
        bar.inc(1);
    }
    figures.seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    // A batch the plan does not have (a longer epoch) is a mismatch too.
    figures.matches_plan &= epoch.next().is_none() && figures.rows == order.len() as u64;
    figures.every_sample_once = delivered.iter().all(|&count| count == 1);
    Ok(figures)
}
