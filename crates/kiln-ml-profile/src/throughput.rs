//! Rolling throughput and MFU from cumulative counters, after Lightning's `Throughput`
//! (`src/lightning/fabric/utilities/throughput.py`, itself from MosaicML Composer).
//!
//! Call [`Throughput::update`] once per **optimizer step** with totals since the start: the
//! elapsed time, optimizer steps, micro-batches, samples, and optionally items (tokens) and
//! FLOPs. Rates are differences between the oldest and newest update of the window divided by
//! the time between them, so an accumulation window of K micro-batches counts as one step
//! (Lightning-AI/litgpt #403, Lightning #19461) and its micro-batches are reported on their own.
//!
//! **Sync the device before reading the clock**: GPU backends queue work, and a clock read
//! without a sync measures how fast the host enqueued it (Lightning #4937, #8222). In Burn,
//! `B::sync(&device)` before `Clock::now`. Leave validation out of the elapsed time (pass the
//! training time only), or [`reset`](Throughput::reset) after it (Lightning #21291).

mod meter;
mod sample;
mod totals;
mod window;

pub use meter::ThroughputMeter;
pub use sample::{ThroughputReport, ThroughputSample};
pub use window::Throughput;
