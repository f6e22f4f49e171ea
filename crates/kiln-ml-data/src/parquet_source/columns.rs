//! Typed column access for row decoders, with errors that name the column and row.

use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};

use crate::DecodeError;

/// The column `name` of `batch` as the concrete array type `A`.
///
/// Fails, naming the column, when the batch has no such column or it has another type.
pub fn column<'a, A: Array + 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a A, DecodeError> {
    downcast(named(batch, name)?, name)
}

/// The column `name` as a primitive array of `T`; nulls are allowed.
pub fn primitive<'a, T: ArrowPrimitiveType>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a PrimitiveArray<T>, DecodeError> {
    primitive_of(named(batch, name)?, name)
}

/// `array` (the column `name`) as a primitive array of `T`; nulls are allowed. The array's own
/// parameters are its own: a timestamp of `T`'s unit in any time zone (Parquet's UTC-adjusted
/// timestamps read as `Timestamp(unit, Some("UTC"))`) and a decimal of any precision and scale
/// pass, as `PrimitiveArray<T>` carries them.
///
/// Fails, naming the column and both types, when it has another type.
fn primitive_of<'a, T: ArrowPrimitiveType>(
    array: &'a ArrayRef,
    name: &str,
) -> Result<&'a PrimitiveArray<T>, DecodeError> {
    array
        .as_any()
        .downcast_ref::<PrimitiveArray<T>>()
        .ok_or_else(|| {
            DecodeError::new(format!(
                "has type {} but the decoder expects {}",
                array.data_type(),
                T::DATA_TYPE
            ))
            .in_column(name)
        })
}

/// The column `name` of `batch`, looked up once: a collation reads a dozen columns a batch, and
/// each lookup compares names field by field.
///
/// Fails, naming the column and the batch's columns, when there is no such column.
pub(crate) fn named<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, DecodeError> {
    let index = batch.schema_ref().index_of(name).map_err(|_| {
        let columns: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect();
        DecodeError::new(format!("no such column (columns: {})", columns.join(", ")))
            .in_column(name)
    })?;
    Ok(batch.column(index))
}

/// `array` (the column `name`) as the concrete array type `A`, or an error naming both types.
fn downcast<'a, A: Array + 'static>(array: &'a ArrayRef, name: &str) -> Result<&'a A, DecodeError> {
    array.as_any().downcast_ref::<A>().ok_or_else(|| {
        DecodeError::new(format!(
            "has type {} but the decoder expects {}",
            array.data_type(),
            std::any::type_name::<A>()
        ))
        .in_column(name)
    })
}

/// The values of the primitive column `name`, which must hold no nulls.
///
/// Timestamps and decimals come back as their raw values, whatever the column's time zone,
/// precision and scale: a decoder that depends on a decimal's scale reads it with
/// [`primitive`] (`primitive::<Decimal128Type>(batch, name)?.scale()`) and refuses another.
///
/// A null is reported with its column and the row of the first one, as
/// [`Error::Decode`](crate::Error::Decode) once the source adds the file and row group.
pub fn required_values<'a, T: ArrowPrimitiveType>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a [T::Native], DecodeError> {
    required_values_of::<T>(named(batch, name)?, name)
}

/// The values of `array` (the column `name`), a primitive array of `T` without nulls: what
/// [`required_values`] checks, for a column already looked up.
pub(crate) fn required_values_of<'a, T: ArrowPrimitiveType>(
    array: &'a ArrayRef,
    name: &str,
) -> Result<&'a [T::Native], DecodeError> {
    let array = primitive_of::<T>(array, name)?;
    reject_nulls(array, name)?;
    Ok(array.values())
}

/// Fails, naming the column and the first null row, when `array` holds a null.
pub fn reject_nulls(array: &dyn Array, name: &str) -> Result<(), DecodeError> {
    if array.null_count() == 0 {
        return Ok(());
    }
    let first = (0..array.len())
        .find(|&row| array.is_null(row))
        .unwrap_or(0);
    Err(DecodeError::new(format!(
        "{} null values where the decoder accepts none",
        array.null_count()
    ))
    .in_column(name)
    .at_row(first as u64))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::{
        Decimal128Type, Float32Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType,
    };
    use arrow_array::{Decimal128Array, Float32Array, Int64Array, TimestampMicrosecondArray};

    use super::*;

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            ("x", Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0])) as _),
            (
                "y",
                Arc::new(Int64Array::from(vec![Some(1), None, None])) as _,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn typed_values_come_back() {
        let batch = batch();
        assert_eq!(
            required_values::<Float32Type>(&batch, "x").unwrap(),
            &[1.0, 2.0, 3.0]
        );
        assert_eq!(primitive::<Int64Type>(&batch, "y").unwrap().null_count(), 2);
    }

    #[test]
    fn nulls_are_rejected_with_the_first_row() {
        let error = required_values::<Int64Type>(&batch(), "y").unwrap_err();
        assert_eq!(error.column(), Some("y"));
        assert_eq!(error.row(), Some(1));
        assert!(error.reason().contains("2 null values"), "{error}");
    }

    #[test]
    fn missing_and_mistyped_columns_are_named() {
        let batch = batch();
        let missing = required_values::<Float32Type>(&batch, "z").unwrap_err();
        assert_eq!(missing.column(), Some("z"));
        assert!(missing.reason().contains("columns: x, y"), "{missing}");
        let mistyped = required_values::<Int64Type>(&batch, "x").unwrap_err();
        assert!(mistyped.reason().contains("has type Float32"), "{mistyped}");
    }

    /// Parquet's UTC-adjusted timestamps read with a time zone, decimals with their own
    /// precision and scale: both come back as `T`'s values; another unit is refused.
    #[test]
    fn timestamps_in_a_time_zone_and_decimals_of_any_precision_come_back() {
        let utc = TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("UTC");
        let price = Decimal128Array::from(vec![1_234, 5_678])
            .with_precision_and_scale(10, 2)
            .unwrap();
        let batch = RecordBatch::try_from_iter([
            ("t", Arc::new(utc) as _),
            ("price", Arc::new(price) as _),
        ])
        .unwrap();
        assert_eq!(
            required_values::<TimestampMicrosecondType>(&batch, "t").unwrap(),
            &[1, 2]
        );
        assert_eq!(
            required_values::<Decimal128Type>(&batch, "price").unwrap(),
            &[1_234, 5_678]
        );
        let error = required_values::<TimestampMillisecondType>(&batch, "t").unwrap_err();
        assert!(error.reason().contains("Timestamp(µs"), "{error}");
    }
}
