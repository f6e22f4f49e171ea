//! [`columnar_fn`]: collation that hands the batch over as Arrow columns.

use arrow_array::RecordBatch;

use super::gather::gather_rows;
use crate::{ArrowRow, CollateFn, collate_fn};

/// Columnar collation by a closure from the batch's columns (one `RecordBatch` of the
/// source's schema, rows in plan order) to the batch: a [`CollateFn`] over [`ArrowRow`]s.
///
/// The batch's rows are gathered from the decoded chunks they sit in ([`gather_rows`]), each
/// column with one Arrow kernel call, and the closure turns them into the batch (host buffers
/// such as [`float_matrix`](crate::float_matrix)'s). The closure runs on a loader worker: on a
/// fusion backend (cuda, wgpu) make device tensors on the training thread, or use
/// [`BurnColumnar`](crate::BurnColumnar), which does. This is the columnar path of a
/// [`ParquetSource`](crate::ParquetSource) with its default decoder,
/// [`ArrowRows`](crate::ArrowRows): no value becomes a per-sample Rust value and back.
///
/// A batch whose rows cannot be gathered (a string column past Arrow's 2 GiB offset limit)
/// panics in the collation, which ends the epoch with an error naming the batch.
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_data::arrow_array::{Float32Array, RecordBatch};
/// use kiln_ml_data::parquet::arrow::ArrowWriter;
/// use kiln_ml_data::{columnar_fn, float_matrix, Loader, LoaderConfig, ParquetSource};
/// use kiln_ml_core::PlanRequest;
/// use kiln_ml_testkit::InOrderSampler;
///
/// let dir = tempfile::tempdir()?;
/// let x = Float32Array::from_iter_values((0..10).map(|i| i as f32));
/// let y = Float32Array::from_iter_values((0..10).map(|i| -(i as f32)));
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(x) as _), ("y", Arc::new(y) as _)])?;
/// let file = std::fs::File::create(dir.path().join("part-0.parquet"))?;
/// let mut writer = ArrowWriter::try_new(file, batch.schema(), None)?;
/// writer.write(&batch)?;
/// writer.close()?;
///
/// let source = ParquetSource::builder().dir(dir.path()).build()?;
/// // Each batch becomes a row-major [rows, 2] matrix of x and y.
/// let collate = columnar_fn(|columns: RecordBatch| float_matrix(&columns, &["x", "y"]));
/// let loader = Loader::new(source, collate, LoaderConfig::new())?;
/// let epoch = loader.plan_epoch(&InOrderSampler::new(4), &PlanRequest::new(0, 0))?;
/// let batches = epoch.collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(batches[0].as_ref().unwrap(), &[0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn columnar_fn<O, F>(function: F) -> CollateFn<impl Fn(Vec<ArrowRow>) -> O + Send + Sync>
where
    F: Fn(RecordBatch) -> O + Send + Sync,
{
    collate_fn(move |rows: Vec<ArrowRow>| function(gather(&rows)))
}

/// The batch's columns; the loader never collates an empty batch.
pub(crate) fn gather(rows: &[ArrowRow]) -> RecordBatch {
    match gather_rows(rows) {
        Ok(Some(batch)) => batch,
        Ok(None) => panic!("an empty batch has no columns to gather"),
        Err(error) => panic!(
            "cannot gather the batch's {} rows column by column: {error}",
            rows.len()
        ),
    }
}
