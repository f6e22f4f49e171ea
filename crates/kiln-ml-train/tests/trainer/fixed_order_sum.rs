//! `fixed_order_sum` on each backend: exact enough, and the same bits on every call, where
//! Burn's `Tensor::sum` adds with atomics (CUDA, wgpu) and may not be.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use kiln_ml_train::fixed_order_sum;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A million values summed 50 times, each sum in two passes (rows of 64, since 10^6 = 2^6 ·
/// 15,625): one result, within f32's rounding of the exact sum. On lavapipe, 300 calls of
/// Burn's `sum()` on such a tensor gave three different results (the `sum_repeatability`
/// example), so a fixed-order sum built on it would fail here.
fn fixed_order_sums_repeat_to_the_bit<B: AutodiffBackend>(device: B::Device) {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let len = 1_000_000;
    let values: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    let exact: f64 = values.iter().map(|&value| f64::from(value)).sum();
    let tensor = Tensor::<B::InnerBackend, 1>::from_data(TensorData::new(values, [len]), &device);
    let sums: Vec<f32> = (0..50)
        .map(|_| fixed_order_sum(tensor.clone()).into_scalar().elem::<f32>())
        .collect();
    assert!(
        sums.iter().all(|sum| sum.to_bits() == sums[0].to_bits()),
        "{sums:?}"
    );
    // f32 partial sums of a million terms of magnitude below 1: within 1e-3 of the exact sum.
    assert!(
        (f64::from(sums[0]) - exact).abs() < 1e-3,
        "{} against {exact}",
        sums[0]
    );
}

/// An empty tensor (a parameter of no elements) sums to zero, not to whatever a reduction over
/// nothing leaves in its output.
fn an_empty_tensor_sums_to_zero<B: AutodiffBackend>(device: B::Device) {
    let empty = Tensor::<B::InnerBackend, 2>::zeros([0, 3], &device);
    assert_eq!(fixed_order_sum(empty).into_scalar().elem::<f32>(), 0.0);
}

crate::backend_tests!(
    fixed_order_sums_repeat_to_the_bit,
    an_empty_tensor_sums_to_zero
);
