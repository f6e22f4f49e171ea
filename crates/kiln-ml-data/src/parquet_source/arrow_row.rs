//! [`ArrowRows`]: the plain Arrow decoder, one compact [`ArrowRow`] per row.

use std::sync::{Arc, OnceLock};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use kiln_ml_core::Fingerprint;

use super::decode::{DecodeError, RowDecoder};
use super::row_major::RowMajor;

/// The plain Arrow path: every row as an [`ArrowRow`], a handle on the decoded chunk it sits
/// in.
///
/// A row costs two words on top of the decoded data, which all rows of a chunk share; a
/// one-row `RecordBatch` per row (what this decoder made before) costs a schema handle and one
/// sliced array per column, 20 to 30 times the data of a narrow row. Use
/// [`ParquetSource::read_record_batch`](crate::ParquetSource::read_record_batch) to get a whole
/// row group as one batch instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrowRows;

impl RowDecoder for ArrowRows {
    type Item = ArrowRow;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<ArrowRow>) -> Result<(), DecodeError> {
        let chunk = Arc::new(Chunk {
            batch: batch.clone(),
            row_major: OnceLock::new(),
        });
        items.extend((0..batch.num_rows()).map(|row| ArrowRow {
            chunk: Arc::clone(&chunk),
            row,
        }));
        Ok(())
    }
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder()
            .str("kiln-data decoder")
            .str("arrow-rows")
            .u64(2)
            .finish()
    }
}

/// One row of a decoded Parquet chunk: the chunk, shared with the other rows decoded with it,
/// and the row's index in it.
#[derive(Debug, Clone)]
pub struct ArrowRow {
    chunk: Arc<Chunk>,
    row: usize,
}

/// A decoded chunk, and its fixed-width columns row-major once a shuffled gather asked for
/// them (see `columnar::row_major`).
#[derive(Debug)]
pub(crate) struct Chunk {
    batch: RecordBatch,
    row_major: OnceLock<Option<RowMajor>>,
}

impl Chunk {
    /// The decoded columns.
    pub(crate) fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The chunk's fixed-width columns without nulls, row-major: staged at the first call.
    pub(crate) fn row_major(&self) -> Option<&RowMajor> {
        self.row_major
            .get_or_init(|| RowMajor::stage(&self.batch))
            .as_ref()
    }
}

impl ArrowRow {
    /// The row as a one-row `RecordBatch` (zero-copy slices of the chunk's columns).
    pub fn to_record_batch(&self) -> RecordBatch {
        self.chunk.batch.slice(self.row, 1)
    }

    /// The value of column `name` as a one-element array, or `None` without such a column.
    pub fn column(&self, name: &str) -> Option<ArrayRef> {
        self.chunk
            .batch
            .column_by_name(name)
            .map(|column| column.slice(self.row, 1))
    }

    /// The columns' names and types.
    pub fn schema(&self) -> SchemaRef {
        self.chunk.batch.schema()
    }

    /// The number of columns.
    pub fn num_columns(&self) -> usize {
        self.chunk.batch.num_columns()
    }

    /// The decoded chunk the row sits in, and the row's index in it: for reading many columns
    /// of a row without slicing.
    pub fn chunk(&self) -> (&RecordBatch, usize) {
        (&self.chunk.batch, self.row)
    }

    /// The chunk itself, with its row-major staging.
    pub(crate) fn shared_chunk(&self) -> &Chunk {
        &self.chunk
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, Int64Array};

    use super::*;

    #[test]
    fn every_row_points_into_one_shared_chunk() {
        let batch =
            RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![7, 8, 9])) as _)])
                .unwrap();
        let mut rows = Vec::new();
        ArrowRows.decode(&batch, &mut rows).unwrap();
        assert_eq!(rows.len(), 3);
        let one = rows[2].to_record_batch();
        assert_eq!(one.num_rows(), 1);
        let id = rows[2].column("id").unwrap();
        let id = id.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((id.len(), id.value(0)), (1, 9));
        assert!(rows[1].column("nope").is_none());
        assert!(
            Arc::ptr_eq(&rows[0].chunk, &rows[2].chunk),
            "one chunk for all rows"
        );
        assert_eq!(rows[1].chunk().1, 1);
    }
}
