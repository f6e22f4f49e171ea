//! A whole-tensor sum whose bits do not depend on thread timing.
//!
//! Burn 0.21's `Tensor::sum` on its CubeCL runtimes (CUDA, wgpu) adds the partial sums of a few
//! cubes into the output with atomics (`SumStrategy::OneShot`) wherever the device has float
//! atomics, so the order of the last additions, and with it the last bits, varies from call to
//! call: 300 sums of one 92,160-element tensor on lavapipe gave two different values (the
//! `sum_repeatability` example measures it). A clipping coefficient computed from such a sum
//! makes two runs of the same seed diverge, and under a chaotic loss (winner-takes-all) they end
//! far apart. `sum_dim` reduces in an order fixed by the launch, the same on every call (300 of
//! 300 equal on lavapipe). Burn has no switch for it: a `deterministic` feature was proposed
//! upstream (tracel-ai/burn#5156) and closed unmerged.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Tensors of up to this many elements are summed in one `sum_dim` pass (one kernel, as
/// Burn's `sum`): a single cube reduces them in microseconds.
const ONE_PASS: usize = 1 << 14;

/// The widest row of a first pass over a larger tensor.
const MAX_ROW: usize = 4096;

/// Narrower rows than this would make the first pass mostly launch overhead.
const MIN_ROW: usize = 32;

/// The sum of every element of `tensor` as a one-element tensor, reduced in an order that
/// depends only on the number of elements, so that the same values give the same bits on every
/// call (unlike Burn's `Tensor::sum` on CUDA and wgpu, see the module docs).
///
/// Up to 16,384 elements this is one `sum_dim` pass. A larger tensor is viewed as rows of
/// the largest power of two up to 4,096 that divides its size, summed side by side, and then
/// their sums are summed the same way; a size with fewer than five factors of two is summed in
/// one pass.
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
    if elements == 0 {
        // Burn's wgpu backend fails a reduction over nothing (a `CallError` from fusion).
        return Tensor::zeros([1], &tensor.device());
    }
    sum_flat(tensor.reshape([elements]), ONE_PASS)
}

/// Sums `flat` in one pass up to `one_pass` elements, else in rows (a parameter so that tests
/// reach the nested case with small tensors).
fn sum_flat<B: Backend>(flat: Tensor<B, 1>, one_pass: usize) -> Tensor<B, 1> {
    let elements = flat.dims()[0];
    let row = row_width(elements);
    if elements <= one_pass || row < MIN_ROW {
        return flat.sum_dim(0);
    }
    let rows = elements / row;
    sum_flat(
        flat.reshape([rows, row]).sum_dim(1).reshape([rows]),
        one_pass,
    )
}

/// The largest power of two up to [`MAX_ROW`] that divides `elements` (a reshape, never a copy).
fn row_width(elements: usize) -> usize {
    let twos = 1usize << elements.trailing_zeros().min(usize::BITS - 1);
    twos.min(MAX_ROW)
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
    fn adds_every_element_once_in_one_pass_and_in_two() {
        // Integers small enough that every f32 partial sum is exact: one pass, rows of 4,096,
        // of 64, and a size with too few factors of two for rows.
        for len in [
            1,
            7,
            ONE_PASS,
            ONE_PASS + 64,
            3 * MAX_ROW * 7,
            32 * 3001,
            ONE_PASS + 2,
        ] {
            let values: Vec<f32> = (0..len).map(|i| (i % 13) as f32).collect();
            let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
            assert_eq!(f64::from(sum_of(values)), exact, "{len} elements");
        }
    }

    #[test]
    fn rows_are_the_largest_power_of_two_that_divides() {
        assert_eq!(row_width(3 * MAX_ROW * 7), MAX_ROW);
        assert_eq!(row_width(ONE_PASS + 64), 64);
        assert_eq!(row_width(32 * 3001), 32);
        assert_eq!(row_width(ONE_PASS + 2), 2);
    }

    #[test]
    fn sums_the_row_sums_in_rows_again_when_there_are_many() {
        // With one pass capped at 64 elements: 4,096 x 128 elements are 128 rows of 4,096,
        // whose 128 sums are one row of 128 again, whose sum takes one pass.
        let len = MAX_ROW * 128;
        let values: Vec<f32> = (0..len).map(|i| (i % 5) as f32).collect();
        let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let tensor =
            Tensor::<Flex, 1>::from_data(TensorData::new(values, [len]), &Default::default());
        let nested = sum_flat(tensor.clone(), 64).into_scalar();
        assert_eq!(f64::from(nested), exact);
        assert_eq!(nested, fixed_order_sum(tensor).into_scalar());
    }

    #[test]
    fn an_empty_tensor_sums_to_zero() {
        let tensor = Tensor::<Flex, 2>::zeros([0, 3], &Default::default());
        assert_eq!(fixed_order_sum(tensor).into_scalar(), 0.0);
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
