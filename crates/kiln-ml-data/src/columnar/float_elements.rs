//! Elements of one or more floats in an Arrow array: a `Float32` array (one float each) or a
//! `FixedSizeList<Float32>` (`width` floats each), read in place.

use std::ops::Range;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_schema::DataType;

use crate::DecodeError;

/// The floats of elements `elements` of `array`, and the floats per element. Fails naming
/// `column` for another type, a width of 0, or a null element or value among those elements
/// (nulls outside them, in a sliced batch's shared buffers, do not count).
pub(crate) fn float_elements<'a>(
    array: &'a dyn Array,
    elements: Range<usize>,
    column: &str,
) -> Result<(&'a [f32], usize), DecodeError> {
    let named = |reason: &str| DecodeError::new(reason).in_column(column);
    let count = elements.len();
    match array.data_type() {
        DataType::Float32 => {
            if has_null(array, elements.start, count) {
                return Err(named("holds a null value"));
            }
            Ok((&array.as_primitive::<Float32Type>().values()[elements], 1))
        }
        DataType::FixedSizeList(field, width) if field.data_type() == &DataType::Float32 => {
            let width = usize::try_from(*width).unwrap_or(0);
            if width == 0 {
                return Err(named("holds fixed-size lists of width 0"));
            }
            let list = array.as_fixed_size_list();
            // Element nulls have no batch row to name (`reject_nulls` would give an element's).
            if has_null(list, elements.start, count) {
                return Err(named("holds a null element"));
            }
            let start = (list.offset() + elements.start) * width;
            let floats = list.values();
            if has_null(floats.as_ref(), start, count * width) {
                return Err(named("holds a null value"));
            }
            let values = floats.as_primitive::<Float32Type>().values();
            Ok((&values[start..start + count * width], width))
        }
        other => Err(named(&format!("holds {other}, not Float32 elements"))),
    }
}

/// Whether `len` values of `array` from `offset` hold a null: counted on its null bitmap, not on
/// a sliced copy of the array (this runs for every column of every batch).
fn has_null(array: &dyn Array, offset: usize, len: usize) -> bool {
    array
        .nulls()
        .is_some_and(|nulls| nulls.slice(offset, len).null_count() > 0)
}
