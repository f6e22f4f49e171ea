//! The synthetic IceCube-like events: one Parquet row per event, its detector pulses in one list
//! column, their count spread log-normally over 10-5,000.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use kiln_ml::data::arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder};
use kiln_ml::data::arrow_array::{ArrayRef, Float32Array, Int32Array, Int64Array, RecordBatch};
use kiln_ml::data::parquet::basic::Compression;
use kiln_ml::data::parquet::file::properties::WriterProperties;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal};

use kiln_ml_examples::parquet_file::write_parquet;
use kiln_ml_examples::timing::progress;

/// Floats per pulse: time, charge, and the sensor's x and y.
pub const PULSE_WIDTH: i32 = 4;
/// The fewest and most pulses an event has.
pub const PULSES: std::ops::RangeInclusive<u32> = 10..=5_000;

/// What to write.
#[derive(Debug, Clone, Copy)]
pub struct EventSpec {
    /// Number of files.
    pub files: u32,
    /// Events over all files (spread evenly, the remainder on the first files).
    pub events: u64,
    /// Largest row group, in events.
    pub row_group_events: usize,
    /// Median pulses per event (the log-normal's median; `sigma` 1).
    pub median_pulses: f64,
    /// Seed of the sizes and values.
    pub seed: u64,
}

/// Writes the events: columns `event_id` (int64, the event's sample id), `n_pulses` (int32,
/// the size column), `energy` (float32, the label) and `pulses` (list of fixed-size lists of
/// [`PULSE_WIDTH`] float32). Returns the file paths and their total bytes.
pub fn write_events(spec: &EventSpec, dir: &Path) -> Result<(Vec<PathBuf>, u64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let sizes = LogNormal::new(spec.median_pulses.ln(), 1.0).context("the pulse distribution")?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(spec.row_group_events))
        .build();
    let bar = progress(u64::from(spec.files), "writing events");
    let (mut paths, mut bytes, mut next_id) = (Vec::new(), 0u64, 0i64);
    for file in 0..u64::from(spec.files) {
        let events = spec.events / u64::from(spec.files)
            + u64::from(file < spec.events % u64::from(spec.files));
        let counts: Vec<i32> = (0..events)
            .map(|_| {
                let pulses = sizes.sample(&mut rng).round() as u32;
                pulses.clamp(*PULSES.start(), *PULSES.end()) as i32
            })
            .collect();
        let mut pulses = ListBuilder::new(FixedSizeListBuilder::new(
            Float32Builder::new(),
            PULSE_WIDTH,
        ));
        for &count in &counts {
            for pulse in 0..count {
                let elements = pulses.values();
                elements.values().append_value(pulse as f32 * 3.5);
                elements
                    .values()
                    .append_value(rng.random_range(0.25f32..4.0));
                elements
                    .values()
                    .append_value(rng.random_range(-500.0f32..500.0));
                elements
                    .values()
                    .append_value(rng.random_range(-500.0f32..500.0));
                elements.append(true);
            }
            pulses.append(true);
        }
        let ids = Int64Array::from_iter_values(next_id..next_id + events as i64);
        next_id += events as i64;
        let energy =
            Float32Array::from_iter_values(counts.iter().map(|&count| (count as f32).ln()));
        let columns: [(&str, ArrayRef); 4] = [
            ("event_id", Arc::new(ids)),
            ("n_pulses", Arc::new(Int32Array::from(counts))),
            ("energy", Arc::new(energy)),
            ("pulses", Arc::new(pulses.finish())),
        ];
        let batch = RecordBatch::try_from_iter(columns)?;
        let path = dir.join(format!("events-{file:05}.parquet"));
        bytes += write_parquet(&path, &batch, &properties)?;
        paths.push(path);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((paths, bytes))
}
