//! Bringing one file's decoded batches to the source schema: columns by name in the source's
//! order, equivalent types converted, partition values appended.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, GenericListArray, MapArray, OffsetSizeTrait, RecordBatch,
    RecordBatchOptions, StructArray,
};
use arrow_schema::{ArrowError, DataType, FieldRef, SchemaRef};

use super::partition::constant_column;

/// Where one column of the source schema comes from in a file's batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnSource {
    /// The batch's column at this index; `convert` when its type differs from the source's.
    File { index: usize, convert: bool },
    /// A Hive partition value of the file (`None`: null).
    Partition(Option<String>),
}

/// How the batches of one file become batches of the source schema.
#[derive(Debug, Clone)]
pub(crate) struct Conform {
    columns: Vec<ColumnSource>,
    /// The batches already have the source schema (the usual case): nothing to do.
    identity: bool,
}

impl Conform {
    /// A plan from one source per column of the source schema; `identity` when the file's
    /// batches already are in the source schema.
    pub(crate) fn new(columns: Vec<ColumnSource>, identity: bool) -> Self {
        Self { columns, identity }
    }

    /// `batch` as a batch of `schema`. On failure, the column that failed and why.
    pub(crate) fn apply(
        &self,
        batch: RecordBatch,
        schema: &SchemaRef,
    ) -> Result<RecordBatch, (Option<String>, String)> {
        if self.identity {
            // The source's one schema handle, not the reader's for this row group: a batch
            // gathered from many chunks then looks its columns up in one schema, in cache. The
            // fields are equal; the schema's own metadata may differ between files (pandas
            // writes the row count into it), so the columns are rebuilt into a batch of the
            // source schema (`with_schema` refuses metadata the source lacks).
            let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
            return RecordBatch::try_new_with_options(
                Arc::clone(schema),
                batch.columns().to_vec(),
                &options,
            )
            .map_err(|error| (None, error.to_string()));
        }
        let rows = batch.num_rows();
        let columns = self
            .columns
            .iter()
            .zip(schema.fields())
            .map(|(source, field)| match source {
                ColumnSource::Partition(value) => Ok(constant_column(value.as_deref(), rows)),
                ColumnSource::File { index, convert } => {
                    let column = batch.columns().get(*index).ok_or_else(|| {
                        (
                            Some(field.name().clone()),
                            format!("the decoded batch has no column {index}"),
                        )
                    })?;
                    if *convert {
                        convert_array(column, field.data_type())
                            .map_err(|error| (Some(field.name().clone()), error.to_string()))
                    } else {
                        Ok(Arc::clone(column))
                    }
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
            .map_err(|error| (None, error.to_string()))
    }
}

/// `array` as the equivalent type `target` (see [`unify`](super::unify::unify)): dictionaries
/// decoded to their values, nested fields renamed and their nullability widened. No values are
/// copied except those of a decoded dictionary.
pub(crate) fn convert_array(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == target {
        return Ok(Arc::clone(array));
    }
    let converted: ArrayRef = match (array.data_type(), target) {
        (DataType::Dictionary(..), target) if !matches!(target, DataType::Dictionary(..)) => {
            let dictionary = array.as_any_dictionary();
            let values =
                arrow_select::take::take(dictionary.values().as_ref(), dictionary.keys(), None)?;
            return convert_array(&values, target);
        }
        (DataType::Dictionary(..), DataType::Dictionary(_, value)) => {
            let dictionary = array.as_any_dictionary();
            dictionary.with_values(convert_array(dictionary.values(), value)?)
        }
        (DataType::List(_), DataType::List(field)) => convert_list::<i32>(array, field)?,
        (DataType::LargeList(_), DataType::LargeList(field)) => convert_list::<i64>(array, field)?,
        (DataType::FixedSizeList(..), DataType::FixedSizeList(field, size)) => {
            let list = array.as_fixed_size_list();
            Arc::new(FixedSizeListArray::try_new(
                Arc::clone(field),
                *size,
                convert_array(list.values(), field.data_type())?,
                list.nulls().cloned(),
            )?)
        }
        (DataType::Struct(_), DataType::Struct(fields)) => {
            let parts = array.as_struct();
            let children = parts
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(child, field)| convert_array(child, field.data_type()))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(StructArray::try_new_with_length(
                fields.clone(),
                children,
                parts.nulls().cloned(),
                parts.len(),
            )?)
        }
        (DataType::Map(..), DataType::Map(field, sorted)) => {
            let map = array.as_map();
            let entries: ArrayRef = Arc::new(map.entries().clone());
            let entries = convert_array(&entries, field.data_type())?;
            Arc::new(MapArray::try_new(
                Arc::clone(field),
                map.offsets().clone(),
                entries.as_struct().clone(),
                map.nulls().cloned(),
                *sorted,
            )?)
        }
        (from, to) => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "cannot read {from} as {to}"
            )));
        }
    };
    Ok(converted)
}

/// A list (32- or 64-bit offsets) with its child field replaced by `field`.
fn convert_list<O: OffsetSizeTrait>(
    array: &ArrayRef,
    field: &FieldRef,
) -> Result<ArrayRef, ArrowError> {
    let list = array.as_list::<O>();
    Ok(Arc::new(GenericListArray::<O>::try_new(
        Arc::clone(field),
        list.offsets().clone(),
        convert_array(list.values(), field.data_type())?,
        list.nulls().cloned(),
    )?))
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{Int64Builder, ListBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{DictionaryArray, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    #[test]
    fn dictionaries_decode_to_their_values_with_nulls_kept() {
        let dictionary: DictionaryArray<Int32Type> = vec![Some("b"), None, Some("a"), Some("b")]
            .into_iter()
            .collect();
        let array: ArrayRef = Arc::new(dictionary);
        let plain = convert_array(&array, &DataType::Utf8).unwrap();
        let plain = plain.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(
            plain.iter().collect::<Vec<_>>(),
            [Some("b"), None, Some("a"), Some("b")]
        );
    }

    #[test]
    fn list_children_are_renamed_without_changing_values() {
        let mut builder = ListBuilder::new(Int64Builder::new());
        builder.append_value([Some(1), Some(2)]);
        builder.append_null();
        builder.append_value([Some(3)]);
        let array: ArrayRef = Arc::new(builder.finish().slice(1, 2));
        let target = DataType::List(Arc::new(Field::new("element", DataType::Int64, true)));
        let converted = convert_array(&array, &target).unwrap();
        assert_eq!(converted.data_type(), &target);
        let list = converted.as_list::<i32>();
        assert!(list.is_null(0));
        let last = list.value(1);
        assert_eq!(
            last.as_any().downcast_ref::<Int64Array>().unwrap().values(),
            &[3]
        );
    }

    #[test]
    fn columns_are_picked_by_position_and_partitions_appended() {
        let batch = RecordBatch::try_from_iter([
            ("b", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("a", Arc::new(Int64Array::from(vec![3, 4])) as ArrayRef),
        ])
        .unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
            Field::new("split", DataType::Utf8, true),
        ]));
        let conform = Conform::new(
            vec![
                ColumnSource::File {
                    index: 1,
                    convert: false,
                },
                ColumnSource::File {
                    index: 0,
                    convert: false,
                },
                ColumnSource::Partition(Some("train".to_owned())),
            ],
            false,
        );
        let out = conform.apply(batch, &schema).unwrap();
        assert_eq!(out.schema(), schema);
        let a = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(a.values(), &[3, 4]);
        let split = out.column(2).as_string::<i32>();
        assert_eq!(split.value(1), "train");
    }
}
