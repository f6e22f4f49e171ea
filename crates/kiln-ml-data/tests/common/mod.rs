//! Shared fixtures: small Parquet datasets written into temporary directories.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_ml_data::arrow_array::types::{Float32Type, Int64Type};
use kiln_ml_data::arrow_array::{Float32Array, Int64Array, RecordBatch};
use kiln_ml_data::parquet::arrow::ArrowWriter;
use kiln_ml_data::parquet::basic::Compression;
use kiln_ml_data::parquet::file::properties::WriterProperties;
use kiln_ml_data::{Error, ParquetSource, RowDecoder, decoder_fn, required_values};

/// Writes `ids` as columns `id` (Int64) and `x` (Float32, id / 2) in row groups of
/// `row_group_rows`, Snappy-compressed.
pub fn write_ids(path: &Path, ids: std::ops::Range<i64>, row_group_rows: usize) {
    write_batch(path, &ids_batch(ids), row_group_rows);
}

/// Columns `id` (Int64) and `x` (Float32, id / 2) for `ids`, non-null.
pub fn ids_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let id = Int64Array::from_iter_values(ids.clone());
    let x = Float32Array::from_iter_values(ids.map(|id| id as f32 / 2.0));
    RecordBatch::try_from_iter([("id", Arc::new(id) as _), ("x", Arc::new(x) as _)]).unwrap()
}

/// Writes one batch in row groups of `row_group_rows`, Snappy-compressed.
pub fn write_batch(path: &Path, batch: &RecordBatch, row_group_rows: usize) {
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_compression(Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// A dataset of consecutive ids over several files of uneven sizes; returns the file paths.
///
/// `files[i]` rows go to file i, in row groups of `row_group_rows`.
pub fn write_dataset(dir: &Path, files: &[i64], row_group_rows: usize) -> Vec<PathBuf> {
    let mut next = 0;
    files
        .iter()
        .enumerate()
        .map(|(index, &rows)| {
            let path = dir.join(format!("part-{index:03}.parquet"));
            write_ids(&path, next..next + rows, row_group_rows);
            next += rows;
            path
        })
        .collect()
}

/// Cuts a file to half its length, as a writer replacing it under an open source would.
pub fn truncate_to_half(path: &Path) {
    let length = std::fs::metadata(path).unwrap().len();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_len(length / 2).unwrap();
}

/// Decodes the `id` column; rejects nulls.
pub fn id_decoder() -> impl RowDecoder<Item = i64> + Clone {
    decoder_fn("id", 1, |batch: &RecordBatch| {
        Ok(required_values::<Int64Type>(batch, "id")?.to_vec())
    })
}

/// Decodes `(id, x)` pairs; rejects nulls.
pub fn pair_decoder() -> impl RowDecoder<Item = (i64, f32)> + Clone {
    decoder_fn("pair", 1, |batch: &RecordBatch| {
        let ids = required_values::<Int64Type>(batch, "id")?;
        let xs = required_values::<Float32Type>(batch, "x")?;
        Ok(ids.iter().copied().zip(xs.iter().copied()).collect())
    })
}

/// Builds a source over `dir`, which must be refused as a schema mismatch of file `b` against
/// the reference `a`, both named; returns the message.
pub fn schema_refusal(dir: &Path, a: &Path, b: &Path) -> String {
    let error = ParquetSource::builder().dir(dir).build().unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, Error::SchemaMismatch { .. }), "{message}");
    let named = format!(
        "schema of {} differs from {}",
        b.canonicalize().unwrap().display(),
        a.canonicalize().unwrap().display()
    );
    assert!(message.starts_with(&named), "{message}");
    message
}
