//! [`ColumnarCollate`]: collation that hands the batch over as Arrow columns.

use std::fmt;

use arrow_array::RecordBatch;

use super::gather::gather_rows;
use crate::{ArrowRow, Collate};

/// Collates [`ArrowRow`]s column by column: the batch's rows, in plan order, are gathered from
/// the decoded chunks they sit in into one `RecordBatch` ([`gather_rows`]), which a closure
/// then turns into the batch (tensors, say: see [`float_matrix`](crate::float_matrix)).
///
/// This is the fast path of a [`ParquetSource`](crate::ParquetSource) with its default
/// decoder, [`ArrowRows`](crate::ArrowRows): no value is turned into a per-sample Rust value
/// and back; each column of a batch is one Arrow kernel call. The order of the rows is exactly
/// the plan's, shuffled or not. See [`columnar_fn`].
#[derive(Clone, Copy)]
pub struct ColumnarCollate<F>(F);

impl<F> fmt::Debug for ColumnarCollate<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColumnarCollate").finish_non_exhaustive()
    }
}

/// Columnar collation by a closure from the batch's columns (one `RecordBatch` of the
/// source's schema, rows in plan order) to the batch.
///
/// A batch whose rows cannot be gathered (a string column past Arrow's 2 GiB offset limit)
/// panics in the collation, which ends the epoch with an error naming the batch.
///
/// ```
/// use std::sync::Arc;
/// use kiln_data::arrow_array::{Float32Array, RecordBatch};
/// use kiln_data::parquet::arrow::ArrowWriter;
/// use kiln_data::{columnar_fn, float_matrix, Loader, LoaderConfig, ParquetSource};
/// use kiln_core::PlanRequest;
/// use kiln_testkit::InOrderSampler;
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
pub fn columnar_fn<F>(function: F) -> ColumnarCollate<F> {
    ColumnarCollate(function)
}

impl<O, F> Collate<ArrowRow> for ColumnarCollate<F>
where
    O: Send,
    F: Fn(RecordBatch) -> O + Send + Sync,
{
    type Output = O;
    fn collate(&self, rows: Vec<ArrowRow>) -> O {
        (self.0)(gather(&rows))
    }
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
