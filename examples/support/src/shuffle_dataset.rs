//! The synthetic dataset: 80-byte events in many Snappy Parquet files of uneven size.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use kiln_ml::data::arrow_array::types::{Float32Type, Int64Type};
use kiln_ml::data::arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use kiln_ml::data::parquet::basic::Compression;
use kiln_ml::data::parquet::file::properties::WriterProperties;
use kiln_ml::data::{DecodeError, RowDecoder, decoder_fn, required_values};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::parquet_file::write_parquet;
use crate::timing::progress;

/// What to write.
#[derive(Debug, Clone, Copy)]
pub struct DatasetSpec {
    /// Number of files.
    pub files: u32,
    /// Rows over all files.
    pub rows: u64,
    /// Largest row group.
    pub row_group_rows: usize,
    /// Seed of the sizes and values.
    pub seed: u64,
}

/// One decoded event.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The event's id, unique across the dataset.
    pub id: i64,
    /// Its class label.
    pub label: i64,
    /// The 16 feature columns, in [`FEATURES`] order.
    pub features: [f32; 16],
}

/// The 16 feature columns, in order.
pub const FEATURES: [&str; 16] = [
    "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12", "f13", "f14",
    "f15",
];

/// The decoder of the synthetic schema.
pub fn row_decoder() -> impl RowDecoder<Item = Row> + Clone {
    decoder_fn("event-row", 1, |batch: &RecordBatch| {
        let ids = required_values::<Int64Type>(batch, "id")?;
        let labels = required_values::<Int64Type>(batch, "label")?;
        let columns = (0..16)
            .map(|i| required_values::<Float32Type>(batch, &format!("f{i}")))
            .collect::<Result<Vec<_>, DecodeError>>()?;
        Ok((0..batch.num_rows())
            .map(|row| Row {
                id: ids[row],
                label: labels[row],
                features: std::array::from_fn(|i| columns[i][row]),
            })
            .collect())
    })
}

/// Splits `rows` into `files` uneven sizes (log-uniform weights spanning about 20x).
fn file_sizes(files: u32, rows: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let weights: Vec<f64> = (0..files)
        .map(|_| rng.random_range(0.0f64..3.0).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|weight| (weight / total * rows as f64).floor().max(1.0) as u64)
        .collect();
    let mut assigned: u64 = sizes.iter().sum();
    let mut index = 0;
    while assigned != rows {
        let slot = &mut sizes[index % files as usize];
        if assigned < rows {
            *slot += 1;
            assigned += 1;
        } else if *slot > 1 {
            *slot -= 1;
            assigned -= 1;
        }
        index += 1;
    }
    sizes
}

/// The name of file `index`.
fn file_name(index: u32) -> String {
    format!("part-{index:05}.parquet")
}

/// Writes the dataset into `dir` (created if missing); returns the file paths and their
/// total size in bytes. Refused before anything is written: no file, fewer rows than files,
/// or `dir` holding anything this write would not replace (an earlier write of more files,
/// a subfolder, data of the user's), which a reader of the folder might take in too.
pub fn write_dataset(spec: &DatasetSpec, dir: &Path) -> Result<(Vec<PathBuf>, u64)> {
    if spec.files == 0 || spec.rows < u64::from(spec.files) {
        bail!(
            "--files {} and --rows {}: the dataset needs at least one file and one row per file",
            spec.files,
            spec.rows
        );
    }
    if dir.exists() && !dir.is_dir() {
        bail!("--dir {} is a file; give a folder", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let names: HashSet<String> = (0..spec.files).map(file_name).collect();
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !names.contains(&name) {
            others.push(name);
        }
    }
    if let Some(first) = others.first() {
        bail!(
            "{} holds {} entries this write would not replace ({first}, ...): a reader of the \
             folder might take them in too; remove them or give an empty folder",
            dir.display(),
            others.len()
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let sizes = file_sizes(spec.files, spec.rows, &mut rng);
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(spec.row_group_rows))
        .build();
    let bar = progress(u64::from(spec.files), "writing Parquet files");
    let (mut paths, mut bytes, mut next_id) = (Vec::new(), 0, 0i64);
    for (index, &rows) in sizes.iter().enumerate() {
        let rows = rows as usize;
        let mut columns: Vec<(String, ArrayRef)> = vec![(
            "id".to_owned(),
            Arc::new(Int64Array::from_iter_values(next_id..next_id + rows as i64)),
        )];
        next_id += rows as i64;
        for feature in 0..16 {
            let values = (0..rows).map(|_| rng.random_range(-2.0f32..2.0));
            let array = Float32Array::from_iter_values(values);
            columns.push((format!("f{feature}"), Arc::new(array)));
        }
        let labels = (0..rows).map(|_| rng.random_range(0..10i64));
        columns.push((
            "label".to_owned(),
            Arc::new(Int64Array::from_iter_values(labels)),
        ));
        let batch = RecordBatch::try_from_iter(columns)?;
        let path = dir.join(file_name(index as u32));
        bytes += write_parquet(&path, &batch, &properties)?;
        paths.push(path);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((paths, bytes))
}
