//! Burn tensors straight from a batch's Arrow columns.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use arrow_array::types::{Float32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use burn::tensor::backend::Backend;

use super::collate::gather;
use super::float_elements::float_elements;
use super::float_rows::float_rows;
use crate::parquet_source::{named, required_values_of};
use crate::{ArrowRow, Collate, DecodeError, Staged, TensorCreation, required_values};

/// Builds a batch (tensors on a device) from its columns: the columnar counterpart of Burn's
/// `Batcher`, used through [`BurnColumnar`].
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
/// use kiln_ml_data::arrow_array::RecordBatch;
/// use kiln_ml_data::{float_matrix, int_vector, ColumnBatcher};
///
/// struct Features;
///
/// impl<B: Backend> ColumnBatcher<B, (Tensor<B, 2>, Tensor<B, 1, Int>)> for Features {
///     fn batch(&self, columns: RecordBatch, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
///         let rows = columns.num_rows();
///         let x = float_matrix(&columns, &["a", "b"]).expect("f32 columns a and b");
///         let label = int_vector(&columns, "label").expect("an int64 column label");
///         (
///             Tensor::from_data(TensorData::new(x, [rows, 2]), device),
///             Tensor::from_data(TensorData::new(label, [rows]), device),
///         )
///     }
/// }
/// # let _ = Features;
/// ```
pub trait ColumnBatcher<B: Backend, O>: Send + Sync {
    /// Builds the batch from its columns (rows in plan order) on `device`.
    fn batch(&self, columns: RecordBatch, device: &B::Device) -> O;
}

/// Collates [`ArrowRow`]s with a [`ColumnBatcher`] on a device: the rows are gathered column by
/// column (as [`columnar_fn`](crate::columnar_fn) does) on the loader's worker threads, and the
/// batcher builds tensors from the columns there too or, with a fusion backend, on the thread
/// that takes the batch ([`TensorCreation`]).
pub struct BurnColumnar<B: Backend, T, O> {
    batcher: Arc<T>,
    device: B::Device,
    creation: TensorCreation,
    /// `creation` resolved for the device once, not per batch (`B::name` formats a string).
    on_consumer: bool,
    output: PhantomData<fn() -> O>,
}

impl<B: Backend, T, O> BurnColumnar<B, T, O> {
    /// Collates with `batcher`, creating batches on `device` ([`TensorCreation::Auto`]).
    pub fn new(batcher: T, device: B::Device) -> Self {
        Self {
            on_consumer: TensorCreation::Auto.on_consumer::<B>(&device),
            batcher: Arc::new(batcher),
            device,
            creation: TensorCreation::Auto,
            output: PhantomData,
        }
    }

    /// Runs the batcher on the thread `creation` says (the gathering stays on the workers).
    pub fn with_tensor_creation(mut self, creation: TensorCreation) -> Self {
        self.creation = creation;
        self.on_consumer = creation.on_consumer::<B>(&self.device);
        self
    }

    /// The device batches are created on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }
}

impl<B: Backend, T, O> fmt::Debug for BurnColumnar<B, T, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BurnColumnar")
            .field("device", &self.device)
            .field("creation", &self.creation)
            .finish_non_exhaustive()
    }
}

impl<B, T, O> Collate<ArrowRow> for BurnColumnar<B, T, O>
where
    B: Backend,
    T: ColumnBatcher<B, O> + 'static,
    O: Send + 'static,
{
    type Output = O;
    fn collate(&self, rows: Vec<ArrowRow>) -> O {
        self.batcher.batch(gather(&rows), &self.device)
    }

    fn stage(&self, rows: Vec<ArrowRow>) -> Staged<O> {
        if !self.on_consumer {
            return Staged::ready(self.collate(rows));
        }
        let columns = gather(&rows);
        let batcher = Arc::clone(&self.batcher);
        let device = self.device.clone();
        Staged::on_consumer(move || batcher.batch(columns, &device))
    }
}

/// The named `Float32` columns (no nulls) as one row-major `[rows, columns.len()]` matrix: the
/// values of a `Tensor<B, 2>` built with `TensorData::new(values, [rows, columns.len()])`.
///
/// A `FixedSizeList<Float32>` column of width `w` counts as `w` consecutive columns, so an
/// embedding stored as one list column lands in place. Fails naming the column that is
/// missing, of another type, or holds a null.
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_data::arrow_array::{Float32Array, RecordBatch};
/// use kiln_ml_data::float_matrix;
///
/// let batch = RecordBatch::try_from_iter([
///     ("x", Arc::new(Float32Array::from(vec![1.0, 2.0])) as _),
///     ("y", Arc::new(Float32Array::from(vec![10.0, 20.0])) as _),
/// ])
/// .unwrap();
/// assert_eq!(float_matrix(&batch, &["y", "x"]).unwrap(), [10.0, 1.0, 20.0, 2.0]);
/// assert_eq!(float_matrix(&batch, &["z"]).unwrap_err().column(), Some("z"));
/// ```
pub fn float_matrix(batch: &RecordBatch, columns: &[&str]) -> Result<Vec<f32>, DecodeError> {
    let rows = batch.num_rows();
    // Each named column as (values, width): a plain column is width 1.
    let mut parts: Vec<(&[f32], usize)> = Vec::with_capacity(columns.len());
    for &name in columns {
        let array = named(batch, name)?;
        match array.data_type() {
            DataType::FixedSizeList(..) => {
                parts.push(float_elements(array.as_ref(), 0..rows, name)?)
            }
            _ => parts.push((required_values_of::<Float32Type>(array, name)?, 1)),
        }
    }
    Ok(float_rows(&parts, rows))
}

/// The named `Int64` column (no nulls) as a vector: the values of a `Tensor<B, 1, Int>`.
///
/// Fails naming the column that is missing, of another type, or holds a null.
pub fn int_vector(batch: &RecordBatch, column: &str) -> Result<Vec<i64>, DecodeError> {
    required_values::<Int64Type>(batch, column).map(<[i64]>::to_vec)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::{Float32Array, Int64Array};

    use super::*;

    #[test]
    fn a_fixed_size_list_column_spreads_over_its_width() {
        let mut list = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for row in 0..3 {
            list.values().append_value(row as f32);
            list.values().append_value(row as f32 + 0.5);
            list.append(true);
        }
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Float32Array::from(vec![7.0, 8.0, 9.0])) as _),
            ("embedding", Arc::new(list.finish()) as _),
        ])
        .unwrap();
        let matrix = float_matrix(&batch, &["embedding", "id"]).unwrap();
        assert_eq!(matrix, [0.0, 0.5, 7.0, 1.0, 1.5, 8.0, 2.0, 2.5, 9.0]);
        // A slice keeps its place in the list's values.
        let sliced = float_matrix(&batch.slice(1, 2), &["embedding"]).unwrap();
        assert_eq!(sliced, [1.0, 1.5, 2.0, 2.5]);
    }

    #[test]
    fn wrong_types_and_nulls_are_named() {
        let batch = RecordBatch::try_from_iter([
            ("n", Arc::new(Int64Array::from(vec![1, 2])) as _),
            (
                "x",
                Arc::new(Float32Array::from(vec![Some(1.0), None])) as _,
            ),
        ])
        .unwrap();
        let error = float_matrix(&batch, &["n"]).unwrap_err();
        assert_eq!(error.column(), Some("n"));
        assert!(error.reason().contains("has type Int64"), "{error}");
        let error = float_matrix(&batch, &["x"]).unwrap_err();
        assert_eq!(error.column(), Some("x"));
        assert_eq!(error.row(), Some(1));
        let error = float_matrix(&batch, &["y"]).unwrap_err();
        assert_eq!(error.column(), Some("y"));
        assert!(error.reason().contains("columns: n, x"), "{error}");
        assert_eq!(int_vector(&batch, "n").unwrap(), [1, 2]);
        let error = int_vector(&batch, "x").unwrap_err();
        assert_eq!(error.column(), Some("x"));
        assert!(error.reason().contains("has type Float32"), "{error}");
    }

    #[test]
    fn a_null_in_a_fixed_size_list_names_its_row() {
        let mut list = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for row in 0..3 {
            list.values().append_value(row as f32);
            if row == 2 {
                list.values().append_null();
            } else {
                list.values().append_value(0.5);
            }
            list.append(true);
        }
        list.values().append_value(0.0);
        list.values().append_value(0.0);
        list.append(false);
        let batch = RecordBatch::try_from_iter([("e", Arc::new(list.finish()) as _)]).unwrap();
        let error = float_matrix(&batch.slice(0, 3), &["e"]).unwrap_err();
        assert_eq!((error.column(), error.row()), (Some("e"), Some(2)));
        assert!(error.reason().contains("null value"), "{error}");
        let error = float_matrix(&batch.slice(3, 1), &["e"]).unwrap_err();
        assert_eq!(error.row(), Some(0));
        assert!(error.reason().contains("null element"), "{error}");
    }
}
