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
/// (nulls outside them, in a sliced batch's shared buffers, do not count); a null's error names
/// as its row the element's index counted from `elements.start` (a caller whose elements are
/// not rows maps it to one).
pub(crate) fn float_elements<'a>(
    array: &'a dyn Array,
    elements: Range<usize>,
    column: &str,
) -> Result<(&'a [f32], usize), DecodeError> {
    let named = |reason: &str| DecodeError::new(reason).in_column(column);
    let count = elements.len();
    match array.data_type() {
        DataType::Float32 => {
            if let Some(element) = first_null(array, elements.start, count) {
                return Err(named("holds a null value").at_row(element as u64));
            }
            Ok((&array.as_primitive::<Float32Type>().values()[elements], 1))
        }
        DataType::FixedSizeList(field, width) if field.data_type() == &DataType::Float32 => {
            let width = usize::try_from(*width).unwrap_or(0);
            if width == 0 {
                return Err(named("holds fixed-size lists of width 0"));
            }
            let list = array.as_fixed_size_list();
            if let Some(element) = first_null(list, elements.start, count) {
                return Err(named("holds a null element").at_row(element as u64));
            }
            let start = (list.offset() + elements.start) * width;
            let floats = list.values();
            if let Some(value) = first_null(floats.as_ref(), start, count * width) {
                return Err(named("holds a null value").at_row((value / width) as u64));
            }
            let values = floats.as_primitive::<Float32Type>().values();
            Ok((&values[start..start + count * width], width))
        }
        other => Err(named(&format!("holds {other}, not Float32 elements"))),
    }
}

/// The first null among `len` values of `array` from `offset`, counted from `offset`: the null
/// bitmap is counted first, not a sliced copy of the array (this runs for every column of every
/// batch), and searched only when it holds one.
fn first_null(array: &dyn Array, offset: usize, len: usize) -> Option<usize> {
    let nulls = array.nulls()?.slice(offset, len);
    if nulls.null_count() == 0 {
        return None;
    }
    nulls.iter().position(|valid| !valid)
}
