//! Writing the examples' generated Parquet files.

use std::path::Path;

use anyhow::{Context, Result};
use kiln_ml::data::arrow_array::RecordBatch;
use kiln_ml::data::parquet::arrow::ArrowWriter;
use kiln_ml::data::parquet::file::properties::WriterProperties;

/// Writes `batch` to a new Parquet file at `path` with `properties`; returns the file's size in
/// bytes.
pub fn write_parquet(
    path: &Path,
    batch: &RecordBatch,
    properties: &WriterProperties,
) -> Result<u64> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties.clone()))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(std::fs::metadata(path)?.len())
}
