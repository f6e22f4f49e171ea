//! [`ArrowRows`]: the plain Arrow decoder, one compact [`ArrowRow`] per row.

use std::sync::{Arc, OnceLock};

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use kiln_ml_core::Fingerprint;

use super::decode::{DecodeError, RowDecoder};
use super::row_major::{RowMajor, gather_staged};
use crate::scatter_hint;

/// The plain Arrow path: every row as an [`ArrowRow`], a handle on the decoded chunk it sits
/// in.
///
/// A row costs two words on top of the decoded data, which all rows of a chunk share; a
/// one-row `RecordBatch` per row (what this decoder made before) costs a schema handle and one
/// sliced array per column, 20 to 30 times the data of a narrow row. Use
/// [`ParquetSource::read_record_batch`](crate::ParquetSource::read_record_batch) to get a whole
/// row group as one batch instead.
///
/// Read by a [`Loader`](crate::Loader) for a plan that takes a block's rows one by one (a
/// shuffle), a chunk's fixed-width columns without nulls are copied row-major as it is decoded,
/// for the columnar gather, and the chunk keeps only its other columns: see
/// [`ArrowRow::chunk`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrowRows;

impl RowDecoder for ArrowRows {
    type Item = ArrowRow;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<ArrowRow>) -> Result<(), DecodeError> {
        // Rows a shuffled plan takes one by one are staged now, while their columns are in
        // cache (see `scatter_hint`).
        let chunk = Arc::new(if scatter_hint::scattered() {
            Chunk::staged(batch)
        } else {
            Chunk::decoded(batch.clone())
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

/// A decoded chunk, and its fixed-width columns without nulls laid out row-major (see
/// `row_major`): staged the first time a gather needs them, or when the chunk is decoded for a
/// shuffled plan (see `scatter_hint`). A chunk staged when decoded keeps only the columns its
/// staging does not hold, and rebuilds the others the first time they are asked for.
#[derive(Debug)]
pub(crate) struct Chunk {
    schema: SchemaRef,
    rows: usize,
    /// Every column: as decoded, or rebuilt from `kept` and the staging.
    batch: OnceLock<RecordBatch>,
    /// For a chunk staged when decoded: its columns, `None` where the staging holds them.
    kept: Option<Vec<Option<ArrayRef>>>,
    row_major: OnceLock<Option<RowMajor>>,
}

impl Chunk {
    /// A chunk with its columns as decoded, staged when first gathered.
    fn decoded(batch: RecordBatch) -> Self {
        Self {
            schema: batch.schema(),
            rows: batch.num_rows(),
            batch: OnceLock::from(batch),
            kept: None,
            row_major: OnceLock::new(),
        }
    }

    /// A chunk staged now, without the columns its staging holds.
    fn staged(batch: &RecordBatch) -> Self {
        let Some(staging) = RowMajor::stage(batch) else {
            let chunk = Self::decoded(batch.clone());
            chunk.row_major.get_or_init(|| None);
            return chunk;
        };
        let mut kept: Vec<Option<ArrayRef>> = batch.columns().iter().cloned().map(Some).collect();
        for column in &staging.columns {
            kept[column.index] = None;
        }
        Self {
            schema: batch.schema(),
            rows: batch.num_rows(),
            batch: OnceLock::new(),
            kept: Some(kept),
            row_major: OnceLock::from(Some(staging)),
        }
    }

    /// The columns' names and types.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Every column; for a chunk staged when decoded, the staged ones are rebuilt (one copy of
    /// them, made once).
    pub(crate) fn batch(&self) -> &RecordBatch {
        self.batch.get_or_init(|| self.rebuilt())
    }

    /// Whether the chunk's columns are at hand, to slice: not for a chunk staged when decoded
    /// (until something asked for its columns).
    pub(crate) fn has_columns(&self) -> bool {
        self.batch.get().is_some()
    }

    /// Column `index`, without rebuilding the staged columns of a chunk staged when decoded
    /// unless it is one of them.
    pub(crate) fn column(&self, index: usize) -> &ArrayRef {
        // A kept column is the decoded array itself, rebuilt batch or not.
        match self.kept.as_ref().and_then(|kept| kept[index].as_ref()) {
            Some(kept) => kept,
            None => self.batch().column(index),
        }
    }

    /// The chunk's fixed-width columns without nulls, row-major: staged at the first call for
    /// a chunk that was not staged when decoded.
    pub(crate) fn row_major(&self) -> Option<&RowMajor> {
        self.row_major
            .get_or_init(|| RowMajor::stage(self.batch()))
            .as_ref()
    }

    /// The columns of a chunk staged when decoded: those it kept, and the staged ones copied
    /// back out of the staging.
    fn rebuilt(&self) -> RecordBatch {
        let (Some(kept), Some(Some(staging))) = (&self.kept, self.row_major.get()) else {
            unreachable!("only a chunk staged when decoded lacks its columns")
        };
        let all_rows: Vec<&[u8]> = (0..self.rows).map(|row| staging.row(row)).collect();
        let mut columns = kept.clone();
        for (index, array) in gather_staged(staging, &all_rows) {
            columns[index] = Some(array);
        }
        let columns = columns
            .into_iter()
            .map(|column| column.expect("every column kept or staged"))
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
            .expect("the decoded chunk's own columns and types")
    }
}

impl ArrowRow {
    /// The row as a one-row `RecordBatch` (zero-copy slices of the chunk's columns, rebuilt
    /// first for a chunk decoded for a shuffled plan: see [`chunk`](Self::chunk)).
    pub fn to_record_batch(&self) -> RecordBatch {
        self.chunk.batch().slice(self.row, 1)
    }

    /// The value of column `name` as a one-element array, or `None` without such a column.
    ///
    /// A column a chunk decoded for a shuffled plan kept (strings, lists, columns with nulls)
    /// is sliced as is; a staged one rebuilds the chunk's columns first (see
    /// [`chunk`](Self::chunk)).
    pub fn column(&self, name: &str) -> Option<ArrayRef> {
        let index = self.chunk.schema().index_of(name).ok()?;
        Some(self.chunk.column(index).slice(self.row, 1))
    }

    /// The columns' names and types.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(self.chunk.schema())
    }

    /// The number of columns.
    pub fn num_columns(&self) -> usize {
        self.chunk.schema().fields().len()
    }

    /// The decoded chunk the row sits in, and the row's index in it: for reading many columns
    /// of a row without slicing.
    ///
    /// A chunk a [`Loader`](crate::Loader) decoded for a shuffled plan holds its fixed-width
    /// columns without nulls row-major only (what the columnar gather copies rows from); the
    /// first call for one of its rows copies them back into Arrow columns, once for the chunk.
    pub fn chunk(&self) -> (&RecordBatch, usize) {
        (self.chunk.batch(), self.row)
    }

    /// The chunk itself, with its row-major staging.
    pub(crate) fn shared_chunk(&self) -> &Chunk {
        &self.chunk
    }

    /// The row's index in its chunk.
    pub(crate) fn index(&self) -> usize {
        self.row
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, Int64Array};

    use super::*;

    #[test]
    fn a_chunk_decoded_for_a_shuffled_plan_keeps_only_its_unstaged_columns() {
        use arrow_array::StringArray;
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![7, 8, 9])) as _),
            (
                "name",
                Arc::new(StringArray::from(vec!["a", "b", "c"])) as _,
            ),
        ])
        .unwrap();
        let mut rows = Vec::new();
        scatter_hint::reading(true, || ArrowRows.decode(&batch, &mut rows)).unwrap();
        let chunk = rows[1].shared_chunk();
        assert!(!chunk.has_columns());
        assert_eq!(rows[1].num_columns(), 2);
        assert_eq!(rows[1].schema(), batch.schema());
        // A column the staging does not hold is read as kept: nothing rebuilt.
        let name = rows[1].column("name").unwrap();
        assert_eq!(
            name.as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .value(0),
            "b"
        );
        assert!(!chunk.has_columns());
        // A staged one rebuilds the columns, once, as decoded.
        let id = rows[2].column("id").unwrap();
        assert_eq!(
            id.as_any().downcast_ref::<Int64Array>().unwrap().value(0),
            9
        );
        assert!(chunk.has_columns());
        assert_eq!(rows[0].to_record_batch(), batch.slice(0, 1));
        assert_eq!(rows[0].chunk().0, &batch);

        // A chunk with nothing to stage keeps its columns.
        let names = batch.project(&[1]).unwrap();
        let mut rows = Vec::new();
        scatter_hint::reading(true, || ArrowRows.decode(&names, &mut rows)).unwrap();
        assert!(rows[0].shared_chunk().has_columns());
        assert!(rows[0].shared_chunk().row_major().is_none());
    }

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
