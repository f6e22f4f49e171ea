//! Each sample's size, read from one column without decoding the others: what size-aware
//! batching needs up front (an event's pulse count, a graph's node count, a scene's agents).

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, OffsetSizeTrait, RecordBatch};
use arrow_schema::DataType;
use kiln_ml_core::{BlockIndex, BlockLayout, BlockSource};
use rayon::prelude::*;

use super::columns::reject_nulls;
use super::decode::{DecodeError, decoder_fn};
use super::source::{ParquetSource, ParquetSourceBuilder};
use crate::Result;

impl ParquetSourceBuilder {
    /// Each sample's size, in sample-id order: the values of integer column `column`, or the
    /// lengths of list column `column` (`List`, `LargeList`, `FixedSizeList`). Only that column
    /// is read (the builder's column choice is replaced), the row groups in parallel.
    ///
    /// The sizes line up with any source built from the same files: a projection changes the
    /// columns, not the row groups. Fails naming the file, row group, column and row of a null,
    /// a negative value, or a column of another type.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_ml_data::arrow_array::{ListArray, RecordBatch, types::Float32Type};
    /// use kiln_ml_data::parquet::arrow::ArrowWriter;
    /// use kiln_ml_data::ParquetSource;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let pulses = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
    ///     Some(vec![Some(1.0), Some(2.0)]),
    ///     Some(vec![]),
    ///     Some(vec![Some(3.0)]),
    /// ]);
    /// let batch = RecordBatch::try_from_iter([("pulses", Arc::new(pulses) as _)])?;
    /// let file = std::fs::File::create(dir.path().join("events.parquet"))?;
    /// let mut writer = ArrowWriter::try_new(file, batch.schema(), None)?;
    /// writer.write(&batch)?;
    /// writer.close()?;
    ///
    /// let sizes = ParquetSource::builder().dir(dir.path()).sample_sizes("pulses")?;
    /// assert_eq!(sizes, [2, 0, 1]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_sizes(self, column: &str) -> Result<Vec<u64>> {
        sizes_from(self.columns([column]).build()?, column)
    }
}

/// The sizes of `column` in `source` (whose projection holds it), the row groups in parallel:
/// the source's files are not reopened.
pub(super) fn sizes_from(source: ParquetSource, column: &str) -> Result<Vec<u64>> {
    // A decoder of sizes: the source's own read path names the file, row group and row of any
    // failure.
    let name = column.to_owned();
    let sizes = decoder_fn("sample-sizes", 1, move |batch: &RecordBatch| {
        sizes_of(batch, &name)
    });
    let source = source.with_decoder(sizes);
    let per_block = (0..source.num_blocks() as BlockIndex)
        .into_par_iter()
        .map(|block| source.read_block(block))
        .collect::<Result<Vec<_>>>()?;
    Ok(per_block.concat())
}

/// The sizes column `column` of a decoded chunk holds (integers) or describes (list lengths).
fn sizes_of(batch: &RecordBatch, column: &str) -> std::result::Result<Vec<u64>, DecodeError> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| DecodeError::new("no such column").in_column(column))?;
    reject_nulls(array.as_ref(), column)?;
    sizes_in(array).map_err(|(row, reason)| {
        let error = DecodeError::new(reason).in_column(column);
        match row {
            Some(row) => error.at_row(row as u64),
            None => error,
        }
    })
}

/// The sizes an array holds (integers) or describes (list lengths); the failing row and why.
fn sizes_in(array: &ArrayRef) -> std::result::Result<Vec<u64>, (Option<usize>, String)> {
    fn lengths<O: OffsetSizeTrait>(offsets: &[O]) -> Vec<u64> {
        offsets
            .windows(2)
            .map(|bounds| (bounds[1] - bounds[0]).as_usize() as u64)
            .collect()
    }
    fn integers<T: ArrowPrimitiveType>(
        array: &ArrayRef,
    ) -> std::result::Result<Vec<u64>, (Option<usize>, String)>
    where
        T::Native: TryInto<u64> + std::fmt::Display + Copy,
    {
        array
            .as_primitive::<T>()
            .values()
            .iter()
            .enumerate()
            .map(|(row, &value)| {
                value
                    .try_into()
                    .map_err(|_| (Some(row), format!("a negative size, {value}")))
            })
            .collect()
    }
    match array.data_type() {
        DataType::Int8 => integers::<Int8Type>(array),
        DataType::Int16 => integers::<Int16Type>(array),
        DataType::Int32 => integers::<Int32Type>(array),
        DataType::Int64 => integers::<Int64Type>(array),
        DataType::UInt8 => integers::<UInt8Type>(array),
        DataType::UInt16 => integers::<UInt16Type>(array),
        DataType::UInt32 => integers::<UInt32Type>(array),
        DataType::UInt64 => integers::<UInt64Type>(array),
        DataType::List(_) => Ok(lengths(array.as_list::<i32>().value_offsets())),
        DataType::LargeList(_) => Ok(lengths(array.as_list::<i64>().value_offsets())),
        DataType::FixedSizeList(_, width) => {
            Ok(vec![u64::try_from(*width).unwrap_or(0); array.len()])
        }
        other => Err((
            None,
            format!("a column of {other}, not of integer sizes nor a list"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Float32Type;
    use arrow_array::{Int32Array, ListArray, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::ParquetSource;

    /// One file of two row groups (3 and 2 rows) with a list, an integer and a string column.
    fn events(dir: &std::path::Path, counts: Vec<i32>) {
        let pulses = ListArray::from_iter_primitive::<Float32Type, _, _>(
            counts
                .iter()
                .map(|&count| Some(vec![Some(1.0); count.max(0) as usize])),
        );
        let batch = RecordBatch::try_from_iter([
            ("pulses", Arc::new(pulses) as ArrayRef),
            ("n", Arc::new(Int32Array::from(counts.clone())) as _),
            (
                "name",
                Arc::new(StringArray::from_iter_values(
                    counts.iter().map(|c| c.to_string()),
                )) as _,
            ),
        ])
        .unwrap();
        let file = std::fs::File::create(dir.join("events.parquet")).unwrap();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(3))
            .build();
        let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    #[test]
    fn sizes_come_from_a_list_or_an_integer_column_in_sample_order() {
        let dir = tempfile::tempdir().unwrap();
        events(dir.path(), vec![4, 0, 7, 1, 2]);
        let builder = ParquetSource::builder().dir(dir.path());
        assert_eq!(
            builder.clone().sample_sizes("pulses").unwrap(),
            [4, 0, 7, 1, 2]
        );
        assert_eq!(builder.clone().sample_sizes("n").unwrap(), [4, 0, 7, 1, 2]);
        // The sizes line up with the whole source's samples (two row groups).
        let source = builder.build().unwrap();
        assert_eq!(source.num_blocks(), 2);
        assert_eq!(source.num_samples(), 5);
    }

    #[test]
    fn wrong_columns_and_negative_sizes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        events(dir.path(), vec![1, 2, 3, -5]);
        let builder = ParquetSource::builder().dir(dir.path());
        let error = builder.clone().sample_sizes("n").unwrap_err().to_string();
        assert!(
            error.contains("row group 1") && error.contains("\"n\"") && error.contains("row 0"),
            "{error}"
        );
        assert!(error.contains("negative size, -5"), "{error}");
        let error = builder
            .clone()
            .sample_sizes("name")
            .unwrap_err()
            .to_string();
        assert!(error.contains("not of integer sizes"), "{error}");
        let error = builder.sample_sizes("nope").unwrap_err().to_string();
        assert!(
            error.contains("column \"nope\" is not in") && error.contains("its columns"),
            "{error}"
        );
    }
}
