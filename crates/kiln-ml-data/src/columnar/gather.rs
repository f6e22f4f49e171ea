//! Gathering rows of decoded chunks into one `RecordBatch`, in the rows' order.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, DataType};
use arrow_select::concat::concat_batches;
use arrow_select::interleave::interleave;
use arrow_select::take::take_record_batch;

use crate::ArrowRow;
use crate::cache_hint::prefetch;
use crate::parquet_source::{Chunk, RowMajor, gather_staged};

/// The rows, in the given order, as one `RecordBatch` assembled column by column.
///
/// The rows must come from chunks of one schema, as every row a
/// [`ParquetSource`](crate::ParquetSource) decodes does (its chunks are conformed to the
/// source's schema). Each column is built with one Arrow kernel call over the chunks the rows
/// come from: a zero-copy slice when the rows are a consecutive run of one chunk (a sequential
/// plan), `take` when they all come from one chunk, and `interleave` otherwise (a shuffled plan).
/// An empty slice gives `None`: there is no schema to give an empty batch.
///
/// Fails only where Arrow does: chunks whose columns differ in number or type, or a variable-width column
/// whose gathered values pass its offset type's limit (2 GiB for `Utf8` and `Binary`). The
/// batch takes the first chunk's schema (column names included): a source's chunks share one.
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_data::arrow_array::{Int64Array, RecordBatch, cast::AsArray, types::Int64Type};
/// use kiln_ml_data::{gather_rows, ArrowRows, RowDecoder};
///
/// let chunk = |values: Vec<i64>| {
///     RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(values)) as _)]).unwrap()
/// };
/// let mut rows = Vec::new();
/// ArrowRows.decode(&chunk(vec![0, 1, 2]), &mut rows).unwrap();
/// ArrowRows.decode(&chunk(vec![10, 11]), &mut rows).unwrap();
/// // A shuffled batch: rows of both chunks, interleaved.
/// let order = [&rows[4], &rows[0], &rows[2], &rows[3]];
/// let batch = gather_rows(order.iter().map(|row| (*row).clone()).collect::<Vec<_>>().as_slice())
///     .unwrap()
///     .unwrap();
/// let ids = batch.column(0).as_primitive::<Int64Type>();
/// assert_eq!(ids.values(), &[11, 0, 2, 10]);
/// ```
pub fn gather_rows(rows: &[ArrowRow]) -> Result<Option<RecordBatch>, ArrowError> {
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    if let Some(sliced) = sliced(rows)? {
        return Ok(Some(sliced));
    }
    let first_chunk = first.shared_chunk();
    let schema = Arc::clone(first_chunk.schema());
    let mut columns: Vec<Option<ArrayRef>> = vec![None; schema.fields().len()];
    // The fixed-width columns every chunk stages alike: from rows, one run of bytes per row.
    if let Some(layout) = first_chunk.row_major()
        && let Some(staged) = staged_rows(rows, layout)
    {
        for (column, array) in gather_staged(layout, &staged) {
            columns[column] = Some(array);
        }
    }
    if columns.iter().all(Option::is_some) {
        let columns = columns.into_iter().flatten().collect();
        return RecordBatch::try_new(schema, columns).map(Some);
    }
    // The other columns (strings, lists, nulls), column by column.
    let (shared, indices) = chunk_indices(rows);
    if let Some(other) =
        (shared.iter()).find(|chunk| chunk.schema().fields().len() != columns.len())
    {
        return Err(ArrowError::SchemaError(format!(
            "rows of chunks with {} and {} columns cannot be gathered into one batch",
            columns.len(),
            other.schema().fields().len()
        )));
    }
    let columns = columns
        .into_iter()
        .enumerate()
        .map(|(column, staged)| {
            if let Some(staged) = staged {
                return Ok(staged);
            }
            let arrays: Vec<&ArrayRef> = shared.iter().map(|chunk| chunk.column(column)).collect();
            if let Some(gathered) = gather_plain(&arrays, &indices) {
                return Ok(gathered);
            }
            let arrays: Vec<&dyn Array> = arrays.iter().map(|array| array.as_ref()).collect();
            interleave(&arrays, &indices)
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema, columns).map(Some)
}

/// The rows without copying, where their chunks' columns are at hand: a zero-copy slice when
/// they are a consecutive run of one chunk (a sequential plan), `take` when they all come from
/// one chunk, slices concatenated for a few long runs (a sequential batch across a block
/// boundary); `None` otherwise (a shuffled plan), and for chunks staged when decoded, whose
/// rows come out of their staging.
fn sliced(rows: &[ArrowRow]) -> Result<Option<RecordBatch>, ArrowError> {
    let first = &rows[0];
    let first_chunk = first.shared_chunk();
    let one_chunk = rows
        .iter()
        .all(|row| std::ptr::eq(row.shared_chunk(), first_chunk));
    if one_chunk {
        if !first_chunk.has_columns() {
            return Ok(None);
        }
        let batch = first_chunk.batch();
        let consecutive = rows
            .iter()
            .enumerate()
            .all(|(offset, row)| row.index() == first.index() + offset);
        if consecutive {
            return Ok(Some(batch.slice(first.index(), rows.len())));
        }
        let indices: UInt32Array = rows
            .iter()
            .map(|row| u32::try_from(row.index()).ok())
            .collect();
        return take_record_batch(batch, &indices).map(Some);
    }
    let Some(runs) = long_runs(rows) else {
        return Ok(None);
    };
    if !runs.iter().all(|(row, _)| row.shared_chunk().has_columns()) {
        return Ok(None);
    }
    let slices: Vec<RecordBatch> = runs
        .into_iter()
        .map(|(row, len)| row.shared_chunk().batch().slice(row.index(), len))
        .collect();
    concat_batches(first_chunk.schema(), &slices).map(Some)
}

/// The rows as runs of consecutive rows of one chunk (first row, length), when the runs average
/// at least [`LONG_RUN`] rows; `None` when the rows are shuffled.
fn long_runs(rows: &[ArrowRow]) -> Option<Vec<(&ArrowRow, usize)>> {
    let most_runs = rows.len() / LONG_RUN;
    let mut runs: Vec<(&ArrowRow, usize)> = Vec::with_capacity(most_runs);
    for row in rows {
        if let Some((start, len)) = runs.last_mut()
            && std::ptr::eq(start.shared_chunk(), row.shared_chunk())
            && row.index() == start.index() + *len
        {
            *len += 1;
            continue;
        }
        if runs.len() == most_runs {
            return None;
        }
        runs.push((row, 1));
    }
    Some(runs)
}

/// The shortest mean run of consecutive rows for which slices and a concatenation beat a
/// gather: below it, rows come from too many places (a shuffled plan).
const LONG_RUN: usize = 8;

/// Each row's staged bytes (its chunk staged now where it was not), when every row's chunk
/// stages the same columns as `layout` (a column with nulls in one chunk only is not staged
/// there): `None` otherwise.
fn staged_rows<'a>(rows: &'a [ArrowRow], layout: &RowMajor) -> Option<Vec<&'a [u8]>> {
    let mut staged = Vec::with_capacity(rows.len());
    // Neighbouring rows rarely share a chunk under a shuffle, but chunks of one source stage
    // alike: comparing layouts is two words.
    let mut alike: *const RowMajor = layout;
    for row in rows {
        let chunk = row.shared_chunk().row_major()?;
        if !std::ptr::eq(chunk, alike) {
            if !chunk.stages_like(layout) {
                return None;
            }
            alike = chunk;
        }
        staged.push(chunk.row(row.index()));
    }
    Some(staged)
}

/// A numeric column without nulls, gathered value by value; `None` for any other column (left
/// to `interleave`).
///
/// In a shuffled batch nearly every row comes from another chunk, so `interleave`'s checks per
/// input array (type, nulls) cost about as much as the values themselves; here each chunk's
/// values are looked up once per column and the gather is a plain indexed copy.
fn gather_plain(arrays: &[&ArrayRef], indices: &[(usize, usize)]) -> Option<ArrayRef> {
    macro_rules! by_type {
        ($($data_type:ident => $arrow:ty),* $(,)?) => {
            match arrays.first()?.data_type() {
                $(DataType::$data_type => gather_values::<$arrow>(arrays, indices),)*
                _ => None,
            }
        };
    }
    by_type!(
        Float32 => Float32Type, Float64 => Float64Type, Float16 => Float16Type,
        Int8 => Int8Type, Int16 => Int16Type, Int32 => Int32Type, Int64 => Int64Type,
        UInt8 => UInt8Type, UInt16 => UInt16Type, UInt32 => UInt32Type, UInt64 => UInt64Type,
    )
}

fn gather_values<T: ArrowPrimitiveType>(
    arrays: &[&ArrayRef],
    indices: &[(usize, usize)],
) -> Option<ArrayRef> {
    let values: Vec<&[T::Native]> = arrays
        .iter()
        .map(|array| {
            let array = array.as_primitive_opt::<T>()?;
            (array.null_count() == 0).then(|| array.values().as_ref())
        })
        .collect::<Option<_>>()?;
    let gathered: Vec<T::Native> = indices
        .iter()
        .map(|&(chunk, row)| values[chunk][row])
        .collect();
    Some(Arc::new(PrimitiveArray::<T>::from_iter_values(gathered)))
}

/// Hashes a pointer with one multiplication (Fibonacci hashing): the chunks of a batch are a
/// few dozen distinct addresses, looked up once per row, where SipHash's resistance to chosen
/// keys buys nothing.
#[derive(Default)]
struct PointerHasher(u64);

impl Hasher for PointerHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(FIBONACCI);
        }
    }
    fn write_usize(&mut self, value: usize) {
        // The product's high bits folded into its low ones, which pick the bucket (an aligned
        // pointer's low bits are zero).
        let product = (value as u64).wrapping_mul(FIBONACCI);
        self.0 = product ^ (product >> 32);
    }
}

/// 2^64 divided by the golden ratio: spreads consecutive addresses over the high bits.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Each chunk's index among a batch's distinct chunks, keyed by the chunk's address.
type ChunkIndex = HashMap<*const Chunk, usize, BuildHasherDefault<PointerHasher>>;

thread_local! {
    /// One map per collating thread, emptied for each batch: a shuffled batch looks up every
    /// row's chunk, and allocating a table per batch cost as much as the lookups.
    static CHUNK_INDEX: RefCell<ChunkIndex> = RefCell::new(HashMap::default());
}

/// The distinct chunks the rows come from (in order of first appearance) and, per row, its
/// chunk's index among them and its row in that chunk.
fn chunk_indices(rows: &[ArrowRow]) -> (Vec<&Chunk>, Vec<(usize, usize)>) {
    CHUNK_INDEX.with_borrow_mut(|index_of| {
        // Emptied first, so no entry of another batch (however it ended) can match; the
        // addresses are only compared, never followed.
        index_of.clear();
        // At most one chunk per row: sized once, not grown (and copied) six times a batch.
        let mut chunks: Vec<&Chunk> = Vec::with_capacity(rows.len());
        // Neighbouring rows usually share a chunk: checking the last one first skips most
        // lookups.
        let mut last: Option<(*const Chunk, usize)> = None;
        let indices = rows
            .iter()
            .map(|row| {
                let (chunk, offset) = (row.shared_chunk(), row.index());
                let key = std::ptr::from_ref(chunk);
                let index = match last {
                    Some((seen, index)) if seen == key => index,
                    _ => *index_of.entry(key).or_insert_with(|| {
                        // Its columns are looked up next, for every chunk: ask for it now.
                        prefetch(chunk);
                        chunks.push(chunk);
                        chunks.len() - 1
                    }),
                };
                last = Some((key, index));
                (index, offset)
            })
            .collect();
        (chunks, indices)
    })
}

#[cfg(test)]
mod tests {
    use arrow_array::types::Float64Type;
    use arrow_array::{Float64Array, Int64Array, StringArray};
    use proptest::prelude::*;

    use super::*;
    use crate::{ArrowRows, RowDecoder};

    fn chunk(ids: std::ops::Range<i64>) -> RecordBatch {
        let names: StringArray = ids.clone().map(|id| Some(format!("n{id}"))).collect();
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from_iter_values(ids)) as _),
            ("name", Arc::new(names) as _),
        ])
        .unwrap()
    }

    /// Three chunks of ids 0..5, 100..103 and 200..207, decoded as rows.
    fn rows() -> Vec<ArrowRow> {
        scattered_rows([false; 3])
    }

    /// The same rows, each chunk decoded as for a shuffled plan where `scattered` says so
    /// (staged when decoded, its staged columns dropped), and with a third column, `score`,
    /// null on even ids (never staged).
    fn scattered_rows(scattered: [bool; 3]) -> Vec<ArrowRow> {
        let mut rows = Vec::new();
        for (ids, scattered) in [0..5, 100..103, 200..207].into_iter().zip(scattered) {
            let scores: Float64Array = ids
                .clone()
                .map(|id| (id % 2 == 1).then_some(id as f64 / 2.0))
                .collect();
            let batch = chunk(ids);
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(scores));
            let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
            fields.push(Arc::new(arrow_schema::Field::new(
                "score",
                DataType::Float64,
                true,
            )));
            let batch =
                RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns).unwrap();
            crate::scatter_hint::reading(scattered, || ArrowRows.decode(&batch, &mut rows))
                .unwrap();
        }
        rows
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        batch
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn a_consecutive_run_is_a_slice_of_its_chunk() {
        let rows = rows();
        let batch = gather_rows(&rows[1..4]).unwrap().unwrap();
        assert_eq!(ids(&batch), [1, 2, 3]);
        let (chunk, _) = rows[1].chunk();
        // Zero-copy: the gathered column shares the chunk's buffer.
        let source = chunk.column(0).as_primitive::<Int64Type>().values().inner();
        let gathered = batch.column(0).as_primitive::<Int64Type>().values().inner();
        assert_eq!(source.as_ptr(), gathered.as_ptr().wrapping_sub(8));
    }

    #[test]
    fn long_runs_across_chunks_are_sliced_and_concatenated() {
        let mut rows = Vec::new();
        for ids in [0..20, 100..120] {
            ArrowRows.decode(&chunk(ids), &mut rows).unwrap();
        }
        // Eight rows at the end of the first chunk, eight at the start of the second.
        let batch = gather_rows(&rows[12..28]).unwrap().unwrap();
        let expected: Vec<i64> = (12..20).chain(100..108).collect();
        assert_eq!(ids(&batch), expected);
        assert_eq!(batch.column(1).as_string::<i32>().value(8), "n100");
        assert!(long_runs(&rows[12..28]).is_some());
        // Short runs are gathered.
        let picked: Vec<ArrowRow> = [0, 20, 1, 21].iter().map(|&i| rows[i].clone()).collect();
        assert!(long_runs(&picked).is_none());
        assert_eq!(
            ids(&gather_rows(&picked).unwrap().unwrap()),
            [0, 100, 1, 101]
        );
    }

    #[test]
    fn chunks_of_other_types_are_refused_not_misread() {
        use arrow_array::{Float32Array, Int32Array};
        let (mut rows, mut other) = (Vec::new(), Vec::new());
        let ints =
            RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef)])
                .unwrap();
        let floats = RecordBatch::try_from_iter([(
            "x",
            Arc::new(Float32Array::from(vec![1.0, 2.0])) as ArrayRef,
        )])
        .unwrap();
        ArrowRows.decode(&ints, &mut rows).unwrap();
        ArrowRows.decode(&floats, &mut other).unwrap();
        // Same width, another type: Arrow's error, as before the row-major staging.
        let mixed = [rows[0].clone(), other[0].clone(), rows[1].clone()];
        assert!(gather_rows(&mixed).is_err());
    }

    #[test]
    fn chunks_with_fewer_columns_are_refused_not_a_panic() {
        let (mut wide, mut narrow) = (Vec::new(), Vec::new());
        ArrowRows.decode(&chunk(0..3), &mut wide).unwrap();
        let ids_only = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef,
        )])
        .unwrap();
        ArrowRows.decode(&ids_only, &mut narrow).unwrap();
        let mixed = [wide[0].clone(), narrow[0].clone(), wide[2].clone()];
        let error = gather_rows(&mixed).unwrap_err().to_string();
        assert!(error.contains("chunks with 2 and 1 columns"), "{error}");
    }

    #[test]
    fn rows_of_one_chunk_out_of_order_are_taken() {
        let rows = rows();
        let picked: Vec<ArrowRow> = [3, 0, 0, 4].iter().map(|&i| rows[i].clone()).collect();
        let batch = gather_rows(&picked).unwrap().unwrap();
        assert_eq!(ids(&batch), [3, 0, 0, 4]);
        assert_eq!(batch.column(1).as_string::<i32>().value(1), "n0");
    }

    #[test]
    fn empty_gives_none() {
        assert!(gather_rows(&[]).unwrap().is_none());
    }

    #[test]
    fn rows_of_chunks_staged_when_decoded_come_out_of_their_staging() {
        let rows = scattered_rows([true, false, true]);
        let staged_only = rows[0].shared_chunk();
        assert!(
            !staged_only.has_columns(),
            "the staged id column was dropped"
        );
        // A consecutive run of such a chunk is gathered, not sliced: its ids are rebuilt
        // nowhere else.
        let run = gather_rows(&rows[1..4]).unwrap().unwrap();
        assert_eq!(ids(&run), [1, 2, 3]);
        assert_eq!(run.column(1).as_string::<i32>().value(2), "n3");
        let scores = run.column(2).as_primitive::<Float64Type>();
        assert_eq!(
            (scores.value(0), scores.is_null(1), scores.value(2)),
            (0.5, true, 1.5)
        );
        assert!(
            !staged_only.has_columns(),
            "gathering did not rebuild the chunk"
        );
        // Across chunks, both kinds mixed.
        let picked: Vec<ArrowRow> = [12, 5, 0, 7].iter().map(|&i| rows[i].clone()).collect();
        assert_eq!(
            ids(&gather_rows(&picked).unwrap().unwrap()),
            [204, 100, 0, 102]
        );
        // The row's own view rebuilds the columns once, with the same values.
        let (batch, row) = rows[3].chunk();
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(row), 3);
        assert!(staged_only.has_columns());
    }

    proptest! {
        /// Any selection of rows, repeats included, comes out in its order, every column,
        /// whichever chunks were staged when decoded.
        #[test]
        fn any_order_is_kept(
            picks in proptest::collection::vec(0usize..15, 1..40),
            scattered in any::<[bool; 3]>(),
        ) {
            let rows = scattered_rows(scattered);
            let picked: Vec<ArrowRow> = picks.iter().map(|&i| rows[i].clone()).collect();
            let batch = gather_rows(&picked).unwrap().unwrap();
            let all_ids: Vec<i64> = (0..5).chain(100..103).chain(200..207).collect();
            let expected: Vec<i64> = picks.iter().map(|&i| all_ids[i]).collect();
            prop_assert_eq!(ids(&batch), expected.clone());
            // Each row's own view (rebuilt from the staging where it was dropped) agrees.
            let viewed: Vec<i64> = picked
                .iter()
                .map(|row| {
                    let (chunk, offset) = row.chunk();
                    chunk.column(0).as_primitive::<Int64Type>().value(offset)
                })
                .collect();
            prop_assert_eq!(viewed, expected.clone());
            let names = batch.column(1).as_string::<i32>();
            let scores = batch.column(2).as_primitive::<Float64Type>();
            for (offset, id) in expected.iter().enumerate() {
                prop_assert_eq!(names.value(offset), format!("n{id}"));
                prop_assert_eq!(scores.is_null(offset), id % 2 == 0);
                if id % 2 == 1 {
                    prop_assert_eq!(scores.value(offset), *id as f64 / 2.0);
                }
            }
        }
    }
}
