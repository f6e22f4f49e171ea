//! One epoch through kiln-ml-data's `Loader`, its batches padded to their longest event, and
//! what it cost: rows per second, padded and real elements, the largest batch.

use anyhow::Result;
use kiln_ml::core::Plan;
use kiln_ml::data::arrow_array::RecordBatch;
use kiln_ml::data::arrow_array::types::Int64Type;
use kiln_ml::data::{
    ArrowRow, Collate, Loader, ParquetSource, columnar_fn, padded_list, required_values,
};

use kiln_ml_examples::timing;

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

/// Runs `plan` to its end (`timing::run_epoch`) and checks the batches: each the plan's, cut
/// where it cuts them, and every one of the dataset's `events` delivered exactly once (the plans
/// here cover it once).
pub fn run_epoch(
    loader: &Loader<ParquetSource, impl Collate<ArrowRow, Output = PaddedBatch> + 'static>,
    plan: Plan,
    events: u64,
    message: &'static str,
) -> Result<EpochFigures> {
    let planned: Vec<Vec<u64>> = (0..plan.batch_count())
        .map(|batch| {
            let range = plan.batch_range(batch);
            plan.order()[range.start as usize..range.end as usize].to_vec()
        })
        .collect();
    let mut figures = EpochFigures {
        matches_plan: true,
        ..EpochFigures::default()
    };
    let mut delivered = vec![0u8; events as usize];
    let time = timing::run_epoch(loader, plan, message, |batch: PaddedBatch| {
        let expected = planned.get(figures.batches as usize);
        figures.matches_plan &= expected.is_some_and(|expected| {
            batch.ids.len() == expected.len()
                && batch
                    .ids
                    .iter()
                    .zip(expected)
                    .all(|(&id, &sample)| id as u64 == sample)
        });
        for &id in &batch.ids {
            // An id outside the dataset leaves some event undelivered: not every sample once.
            if let Some(count) = delivered.get_mut(id as usize) {
                *count = count.saturating_add(1);
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
    })?;
    figures.seconds = time.seconds;
    // Fewer batches than planned are a mismatch too.
    figures.matches_plan &= figures.batches == planned.len() as u64;
    figures.every_sample_once = delivered.iter().all(|&count| count == 1);
    Ok(figures)
}
