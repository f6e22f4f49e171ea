//! A whole-tensor sum whose bits do not depend on thread timing.
//!
//! Burn 0.21's `Tensor::sum` on its CubeCL runtimes (CUDA, wgpu) adds the partial sums of a few
//! cubes into the output with atomics (`SumStrategy::OneShot`) wherever the device has float
//! atomics, so the order of the last additions, and with it the last bits, varies from call to
//! call: 300 sums of one 92,160-element tensor on lavapipe gave two different values. A
//! clipping coefficient or a loss computed from such a sum makes two runs of the same seed
//! diverge, and under a chaotic loss (winner-takes-all) they end far apart. `sum_dim` reduces in
//! an order fixed by the launch, the same on every call (300 of 300 equal on lavapipe).

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Elements each first-stage row adds: enough rows for a large tensor to spread over the device,
/// few enough that the second stage is small.
const ROW: usize = 4096;

/// The sum of every element of `tensor` as a one-element tensor, reduced in an order that
/// depends only on the number of elements, so that the same values give the same bits on every
/// call (unlike Burn's `Tensor::sum` on CUDA and wgpu, see the module docs).
///
/// Rows of 4,096 elements are summed side by side, then their sums, then the tail that fills
/// no row is added.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{Tensor, TensorData};
///
/// let device = Default::default();
/// let values: Vec<f32> = (0..10_000).map(|i| (i % 7) as f32).collect();
/// let tensor = Tensor::<Flex, 2>::from_data(TensorData::new(values, [100, 100]), &device);
/// let total = kiln_ml_train::fixed_order_sum(tensor);
/// assert_eq!(total.into_scalar(), 29_994.0);
/// ```
pub fn fixed_order_sum<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, 1> {
    let elements = tensor.shape().num_elements();
    sum_flat(tensor.reshape([elements]))
}

fn sum_flat<B: Backend>(flat: Tensor<B, 1>) -> Tensor<B, 1> {
    let elements = flat.dims()[0];
    let rows = elements / ROW;
    if rows < 2 {
        return flat.sum_dim(0);
    }
    let whole = rows * ROW;
    let row_sums = flat
        .clone()
        .slice(0..whole)
        .reshape([rows, ROW])
        .sum_dim(1)
        .reshape([rows]);
    let total = sum_flat(row_sums);
    if whole == elements {
        total
    } else {
        total + flat.slice(whole..elements).sum_dim(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    fn sum_of(values: Vec<f32>) -> f32 {
        let len = values.len();
        let tensor =
            Tensor::<Flex, 1>::from_data(TensorData::new(values, [len]), &Default::default());
        fixed_order_sum(tensor).into_scalar()
    }

    #[test]
    fn adds_every_element_once_around_the_row_boundaries() {
        // Integers small enough that every f32 partial sum is exact.
        for len in [
            1,
            7,
            ROW - 1,
            ROW,
            ROW + 1,
            2 * ROW - 1,
            2 * ROW,
            2 * ROW + 3,
            9 * ROW + 17,
        ] {
            let values: Vec<f32> = (0..len).map(|i| (i % 13) as f32).collect();
            let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
            assert_eq!(f64::from(sum_of(values)), exact, "{len} elements");
        }
    }

    #[test]
    fn nests_when_the_row_sums_fill_rows_themselves() {
        // ROW^2 + ROW + 5 elements: 4,097 rows whose sums form one row and a tail of their own.
        // Ones at each boundary and zeros elsewhere keep the sum exact.
        let len = ROW * ROW + ROW + 5;
        let marked = [
            0,
            ROW - 1,
            ROW,
            ROW * ROW - 1,
            ROW * ROW,
            ROW * ROW + ROW,
            len - 1,
        ];
        let mut values = vec![0.0f32; len];
        for index in marked {
            values[index] = 1.0;
        }
        assert_eq!(sum_of(values), marked.len() as f32);
    }

    #[test]
    fn keeps_the_shape_out_of_the_result() {
        let device = Default::default();
        let tensor = Tensor::<Flex, 3>::ones([3, 5, 2], &device);
        let total = fixed_order_sum(tensor);
        assert_eq!(total.dims(), [1]);
        assert_eq!(total.into_scalar(), 30.0);
    }
}
