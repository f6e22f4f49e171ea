//! A decoded chunk's fixed-width columns laid out row after row, for gathering shuffled rows.
//!
//! Under a shuffled plan the rows of a batch come from as many decoded chunks as it has rows,
//! nearly (54 of 64 in the `block_shuffle` example). Gathered column by column, every value is
//! a cache and TLB miss in a buffer of its own: 18 per row of that example's 18 columns. Staged
//! row-major, a row's fixed-width values are one run of bytes (80 there), one or two misses; the
//! columns are then cut out of the batch's rows while they are in cache. A chunk is staged when
//! it is decoded for a plan that scatters its rows (see `scatter_hint`), or else the first time
//! a gather needs it: sequential plans, which slice chunks, never pay for it.

use std::sync::Arc;

use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};
use arrow_buffer::{Buffer, MutableBuffer, ScalarBuffer};
use arrow_schema::DataType;

use crate::cache_hint::prefetch;
use crate::interner::Interner;

/// The types a row stages: fixed-width numbers. A type's code in the layout key is its place
/// here, plus one.
static STAGED_TYPES: [DataType; 11] = [
    DataType::Int8,
    DataType::UInt8,
    DataType::Int16,
    DataType::UInt16,
    DataType::Float16,
    DataType::Int32,
    DataType::UInt32,
    DataType::Float32,
    DataType::Int64,
    DataType::UInt64,
    DataType::Float64,
];

/// One staged column: its index in the chunk, its bytes' offset in a staged row, its width,
/// its type's code (see [`STAGED_TYPES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedColumn {
    pub(crate) index: usize,
    offset: usize,
    width: usize,
    code: u64,
}

/// Staged columns of one width, side by side in a row: `columns` of them from byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WidthRun {
    width: usize,
    offset: usize,
    columns: usize,
}

/// A chunk's fixed-width columns without nulls, row after row.
pub(crate) struct RowMajor {
    pub(crate) columns: Vec<StagedColumn>,
    /// The columns grouped by width (they are sorted widest first).
    runs: Vec<WidthRun>,
    /// Which columns are staged and as what: bit `i` of the first words set when column `i` is
    /// staged, then 4 bits per staged column naming its type. Equal keys, equal layouts.
    /// Shared ([`LAYOUT_KEYS`]): chunks of one source hold one key.
    key: Arc<[u64]>,
    stride: usize,
    data: Vec<u8>,
}

impl std::fmt::Debug for RowMajor {
    // The layout, not the bytes (a chunk's worth of them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowMajor")
            .field("columns", &self.columns)
            .field("stride", &self.stride)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl RowMajor {
    /// The chunk's numeric columns without nulls, staged; `None` when it has none.
    pub(crate) fn stage(batch: &RecordBatch) -> Option<Self> {
        let mut columns = Vec::new();
        for (index, column) in batch.columns().iter().enumerate() {
            if column.null_count() > 0 {
                continue;
            }
            if let Some((width, code)) = staged_type(column.data_type()) {
                columns.push(StagedColumn {
                    index,
                    offset: 0,
                    width,
                    code,
                });
            }
        }
        // Widest first: every offset is then a multiple of its value's width, in a row and in a
        // gathered batch's column-major buffer (see `gather_staged`).
        columns.sort_by_key(|column| std::cmp::Reverse(column.width));
        let mut stride = 0;
        let mut runs: Vec<WidthRun> = Vec::new();
        for column in &mut columns {
            column.offset = stride;
            stride += column.width;
            match runs.last_mut() {
                Some(run) if run.width == column.width => run.columns += 1,
                _ => runs.push(WidthRun {
                    width: column.width,
                    offset: column.offset,
                    columns: 1,
                }),
            }
        }
        if columns.is_empty() {
            return None;
        }
        let key = LAYOUT_KEYS.intern(layout_key(batch.num_columns(), &columns).into());
        let rows = batch.num_rows();
        let mut data = vec![0u8; rows * stride];
        for column in &columns {
            let array = batch.column(column.index).to_data();
            let start = array.offset() * column.width;
            let values = &array.buffers()[0].as_slice()[start..start + rows * column.width];
            scatter(&mut data, values, stride, column.offset, column.width);
        }
        Some(Self {
            columns,
            runs,
            key,
            stride,
            data,
        })
    }

    /// Whether `other` stages the same columns, of the same types, at the same places.
    pub(crate) fn stages_like(&self, other: &RowMajor) -> bool {
        // Under a shuffle this runs for nearly every row, each of another chunk: the shared key
        // answers without reading either key (a cache miss each, when compared).
        Arc::ptr_eq(&self.key, &other.key) || self.key == other.key
    }

    /// Row `row`'s staged bytes.
    pub(crate) fn row(&self, row: usize) -> &[u8] {
        &self.data[row * self.stride..(row + 1) * self.stride]
    }
}

/// The staged columns of `rows` (each a staged row of `layout`, or of a chunk that
/// [stages like](RowMajor::stages_like) it), in order: `(column index, array)`.
pub(crate) fn gather_staged(layout: &RowMajor, rows: &[&[u8]]) -> Vec<(usize, ArrayRef)> {
    // One run of bytes per row: the only random reads of the gather, all asked for first.
    for row in rows {
        prefetch(*row);
    }
    // The values go to their columns, all in one buffer, column after column (each starts at
    // `rows × offset`, a multiple of its width: the arrays cut from it are aligned).
    let count = rows.len();
    let mut columns = MutableBuffer::from_len_zeroed(count * layout.stride);
    let out = columns.as_slice_mut();
    for run in &layout.runs {
        gather_run(out, rows, run);
    }
    let columns: Buffer = columns.into();
    layout
        .columns
        .iter()
        .map(|column| {
            let values = columns.slice_with_length(count * column.offset, count * column.width);
            (column.index, primitive_array(column.code, values, count))
        })
        .collect()
}

/// The layout keys of every chunk staged, shared (see [`RowMajor::stages_like`]).
static LAYOUT_KEYS: Interner<[u64]> = Interner::new(64);

/// The staged columns' key (see [`RowMajor`]): which columns, then their types' codes, packed.
fn layout_key(num_columns: usize, columns: &[StagedColumn]) -> Vec<u64> {
    let mut key = vec![0u64; num_columns.div_ceil(64)];
    for column in columns {
        key[column.index / 64] |= 1 << (column.index % 64);
    }
    // In column order (the staged order is by width), 16 type codes a word.
    let mut by_index: Vec<&StagedColumn> = columns.iter().collect();
    by_index.sort_by_key(|column| column.index);
    for (slot, column) in by_index.iter().enumerate() {
        if slot % 16 == 0 {
            key.push(0);
        }
        *key.last_mut().expect("pushed above") |= column.code << (4 * (slot % 16));
    }
    key
}

/// The value width and key code of a stageable type; `None` for any other.
fn staged_type(data_type: &DataType) -> Option<(usize, u64)> {
    let place = STAGED_TYPES.iter().position(|staged| staged == data_type)?;
    Some((data_type.primitive_width()?, place as u64 + 1))
}

/// `count` values in `values` (aligned, as `gather_staged` cuts them) as an array of the staged
/// type `code` (see [`STAGED_TYPES`]).
///
/// Built as its concrete `PrimitiveArray`: a shuffled batch makes one array per staged column,
/// and going through `ArrayData` (a type clone, a validation, a dynamic build) cost as much as
/// gathering the values.
fn primitive_array(code: u64, values: Buffer, count: usize) -> ArrayRef {
    fn typed<T: ArrowPrimitiveType>(values: Buffer, count: usize) -> ArrayRef {
        Arc::new(PrimitiveArray::<T>::new(
            ScalarBuffer::new(values, 0, count),
            None,
        ))
    }
    // The code names its type by its place in `STAGED_TYPES`: one list, no second numbering.
    match &STAGED_TYPES[code as usize - 1] {
        DataType::Int8 => typed::<Int8Type>(values, count),
        DataType::UInt8 => typed::<UInt8Type>(values, count),
        DataType::Int16 => typed::<Int16Type>(values, count),
        DataType::UInt16 => typed::<UInt16Type>(values, count),
        DataType::Float16 => typed::<Float16Type>(values, count),
        DataType::Int32 => typed::<Int32Type>(values, count),
        DataType::UInt32 => typed::<UInt32Type>(values, count),
        DataType::Float32 => typed::<Float32Type>(values, count),
        DataType::Int64 => typed::<Int64Type>(values, count),
        DataType::UInt64 => typed::<UInt64Type>(values, count),
        DataType::Float64 => typed::<Float64Type>(values, count),
        other => unreachable!("{other} is not a staged type"),
    }
}

/// Writes each value of `values` (`width` bytes each) at `offset` of its row of `stride` bytes.
fn scatter(rows: &mut [u8], values: &[u8], stride: usize, offset: usize, width: usize) {
    fn fixed<const W: usize>(rows: &mut [u8], values: &[u8], stride: usize, offset: usize) {
        for (row, value) in rows.chunks_exact_mut(stride).zip(values.chunks_exact(W)) {
            row[offset..offset + W].copy_from_slice(value);
        }
    }
    match width {
        1 => fixed::<1>(rows, values, stride, offset),
        2 => fixed::<2>(rows, values, stride, offset),
        4 => fixed::<4>(rows, values, stride, offset),
        _ => fixed::<8>(rows, values, stride, offset),
    }
}

/// Copies the values of `run` (columns of one width, side by side in each row) out of `rows`
/// into their columns of a column-major buffer of `rows.len()` rows, column after column: each
/// column one run of writes, each value one read of a row already fetched. (Row after row,
/// each value cost four bounds checks.)
fn gather_run(out: &mut [u8], rows: &[&[u8]], run: &WidthRun) {
    fn fixed<const W: usize>(out: &mut [u8], rows: &[&[u8]], run: &WidthRun) {
        let count = rows.len();
        if count == 0 {
            return;
        }
        let run_out = &mut out[count * run.offset..count * (run.offset + run.columns * W)];
        for (column, column_out) in run_out.chunks_exact_mut(count * W).enumerate() {
            let at = run.offset + column * W;
            for (value, row) in column_out.chunks_exact_mut(W).zip(rows) {
                value.copy_from_slice(&row[at..at + W]);
            }
        }
    }
    match run.width {
        1 => fixed::<1>(out, rows, run),
        2 => fixed::<2>(out, rows, run),
        4 => fixed::<4>(out, rows, run),
        _ => fixed::<8>(out, rows, run),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Int8Type, Int16Type, Int64Type};
    use arrow_array::{Float32Array, Float64Array, Int8Array, Int16Array, Int64Array, StringArray};

    use super::*;

    fn chunk(base: i64) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(base..base + 4)) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from(vec!["a", "b", "c", "d"])) as _,
            ),
            (
                "small",
                Arc::new(Int16Array::from_iter_values((0..4).map(|i| i as i16 - 2))) as _,
            ),
            (
                "maybe",
                Arc::new(Float64Array::from(vec![Some(1.0), None, Some(3.0), None])) as _,
            ),
            (
                "ratio",
                Arc::new(Float32Array::from_iter_values(
                    (0..4).map(|i| i as f32 / 2.0),
                )) as _,
            ),
            (
                "tiny",
                Arc::new(Int8Array::from_iter_values((0..4).map(|i| base as i8 + i))) as _,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn fixed_width_columns_without_nulls_are_staged_and_gathered_in_order() {
        let (first, second) = (chunk(0), chunk(100).slice(1, 3));
        let staged = [
            RowMajor::stage(&first).unwrap(),
            RowMajor::stage(&second).unwrap(),
        ];
        // Strings and the column with nulls are left to the column-by-column path.
        // Widest first in a row: i64, f32, i16, i8.
        let indices: Vec<usize> = staged[0].columns.iter().map(|c| c.index).collect();
        assert_eq!(indices, [0, 4, 2, 5]);
        // Columns 0, 2, 4 and 5 staged; in column order i64 (9), i16 (3), f32 (8), i8 (1).
        assert_eq!(*staged[0].key, [0b110101, 0x1839]);
        assert!(staged[1].stages_like(&staged[0]));
        assert_eq!(staged[1].columns, staged[0].columns);
        let rows = |picks: &[(usize, usize)]| -> Vec<&[u8]> {
            picks
                .iter()
                .map(|&(chunk, row)| staged[chunk].row(row))
                .collect()
        };
        // Rows: second's row 2 (id 103), first's row 0, second's row 0 (id 101), first's row 3.
        let gathered = gather_staged(&staged[0], &rows(&[(1, 2), (0, 0), (1, 0), (0, 3)]));
        let by_index = |index: usize| {
            gathered
                .iter()
                .find(|(column, _)| *column == index)
                .map(|(_, array)| array.clone())
                .unwrap()
        };
        let ratio = by_index(4);
        assert_eq!(
            ratio.as_primitive::<Float32Type>().values(),
            &[1.5, 0.0, 0.5, 1.5]
        );
        let tiny = by_index(5);
        assert_eq!(tiny.as_primitive::<Int8Type>().values(), &[103, 0, 101, 3]);
        // An odd row count: every column cut from the shared buffer is still aligned.
        let odd = gather_staged(&staged[1], &rows(&[(0, 1), (1, 1), (0, 2)]));
        assert_eq!(odd[0].1.as_primitive::<Int64Type>().values(), &[1, 102, 2]);
        assert_eq!(
            odd[1].1.as_primitive::<Float32Type>().values(),
            &[0.5, 1.0, 1.0]
        );
        assert_eq!(odd[2].1.as_primitive::<Int16Type>().values(), &[-1, 0, 0]);
        assert_eq!(odd[3].1.as_primitive::<Int8Type>().values(), &[1, 102, 2]);
        let ids = gathered[0].1.as_primitive::<Int64Type>();
        assert_eq!(ids.values(), &[103, 0, 101, 3]);
        let small = by_index(2);
        let small = small.as_primitive::<Int16Type>();
        assert_eq!(small.values(), &[1, -2, -1, 1]);
    }

    #[test]
    fn a_sliced_chunk_is_staged_from_its_offset() {
        // A slice of a longer chunk: its arrays start at an offset into their buffers.
        let rows = 150;
        let long = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..rows as i64 + 3)) as ArrayRef,
            ),
            (
                "half",
                Arc::new(Float32Array::from_iter_values(
                    (0..rows + 3).map(|i| i as f32 / 2.0),
                )) as _,
            ),
        ])
        .unwrap();
        let staged = RowMajor::stage(&long.slice(3, rows)).unwrap();
        let every: Vec<&[u8]> = (0..rows).map(|row| staged.row(row)).collect();
        let gathered = gather_staged(&staged, &every);
        let ids = gathered[0].1.as_primitive::<Int64Type>();
        assert_eq!(
            ids.values().to_vec(),
            (3..rows as i64 + 3).collect::<Vec<_>>()
        );
        let halves = gathered[1].1.as_primitive::<Float32Type>();
        let expected: Vec<f32> = (3..rows + 3).map(|i| i as f32 / 2.0).collect();
        assert_eq!(halves.values().to_vec(), expected);
    }

    #[test]
    fn chunks_share_a_key_only_when_they_stage_alike() {
        let staged = RowMajor::stage(&chunk(0)).unwrap();
        let alike = RowMajor::stage(&chunk(7)).unwrap();
        assert!(Arc::ptr_eq(&staged.key, &alike.key));
        assert!(alike.stages_like(&staged));
        // The same columns, one of them another type: another layout.
        let retyped = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("ratio", Arc::new(Float64Array::from(vec![0.5])) as _),
        ])
        .unwrap();
        let original = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("ratio", Arc::new(Float32Array::from(vec![0.5])) as _),
        ])
        .unwrap();
        let (retyped, original) = (
            RowMajor::stage(&retyped).unwrap(),
            RowMajor::stage(&original).unwrap(),
        );
        assert!(!retyped.stages_like(&original));
        assert!(!original.stages_like(&staged));
    }

    #[test]
    fn every_staged_type_comes_back_as_itself() {
        for data_type in &STAGED_TYPES {
            let (width, code) = staged_type(data_type).unwrap();
            let values = Buffer::from(vec![0u8; 3 * width]);
            let array = primitive_array(code, values, 3);
            assert_eq!((array.data_type(), array.len()), (data_type, 3));
        }
    }

    #[test]
    fn a_chunk_without_stageable_columns_is_not_staged() {
        let names = RecordBatch::try_from_iter([(
            "name",
            Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
        )])
        .unwrap();
        assert!(RowMajor::stage(&names).is_none());
    }
}
