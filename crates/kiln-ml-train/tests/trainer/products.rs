//! Mixed precision keeps f32's accuracy only if the matrix products of f16 and bf16 inputs
//! accumulate in f32, as PyTorch's do. Burn 0.21's CubeCL kernels (CUDA and wgpu) choose an
//! f32 accumulator for low-precision inputs; flex computes in f32. This checks it where it
//! matters most: a long inner dimension of positive terms, whose sum an f16 accumulator cannot
//! hold (at 1024 its spacing is 1.0, so every term under 0.5 would be lost).

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};

const ROWS: usize = 4;
const INNER: usize = 4096;

/// Values in [0, 1), exactly representable in f16 and bf16 (multiples of 1/128).
fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % 128) as f32 / 128.0
        })
        .collect()
}

fn low_precision_products_accumulate_in_f32<B: AutodiffBackend>(device: B::Device) {
    let lhs = values(ROWS * INNER, 1);
    let rhs = values(INNER * ROWS, 2);
    // The exact products, in f64 on the host.
    let mut exact = vec![0f64; ROWS * ROWS];
    for i in 0..ROWS {
        for j in 0..ROWS {
            exact[i * ROWS + j] = (0..INNER)
                .map(|k| f64::from(lhs[i * INNER + k]) * f64::from(rhs[k * ROWS + j]))
                .sum();
        }
    }
    let mut checked = 0;
    for (dtype, stored) in [
        (FloatDType::F16, DType::F16),
        (FloatDType::BF16, DType::BF16),
    ] {
        // lavapipe has no bf16.
        if !B::supports_dtype(&device, stored) {
            continue;
        }
        checked += 1;
        let tensor = |data: &[f32], shape: [usize; 2]| {
            Tensor::<B::InnerBackend, 2>::from_data(TensorData::new(data.to_vec(), shape), &device)
                .cast(dtype)
        };
        let product = tensor(&lhs, [ROWS, INNER])
            .matmul(tensor(&rhs, [INNER, ROWS]))
            .cast(FloatDType::F32)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        // The output is rounded to f16 (bf16): relative 2^-11 (2^-8) of a value near 1024.
        let tolerance = match dtype {
            FloatDType::BF16 => 8e-3,
            _ => 1e-3,
        };
        for (got, want) in product.iter().zip(&exact) {
            let relative = (f64::from(*got) - want).abs() / want;
            assert!(
                relative <= tolerance,
                "{dtype:?} product over {INNER} terms: {got} against {want} (relative error \
                 {relative:.2e} > {tolerance:.0e}): the accumulator is not f32"
            );
        }
    }
    // Every backend kiln tests on has f16 or bf16: a test that checked neither checked nothing.
    assert!(checked >= 1, "the device supports neither f16 nor bf16");
}

/// f32 products keep f32's precision, or TF32's where the backend rounds inputs to it (Burn
/// 0.21 on CUDA: tensor-core kernels for f32 inputs); either way they accumulate in f32. The
/// trainer tests compare f32 runs at the tolerance `common::f32_tolerance` derives from this.
fn f32_products_keep_f32_or_tf32_precision<B: AutodiffBackend>(device: B::Device) {
    let tf32 = crate::common::products_round_to_tf32::<B::InnerBackend>(&device);
    // Values in [-1, 1) with every mantissa bit used, so TF32's rounding shows.
    let mut state = 7u64;
    let mut values = |count: usize| -> Vec<f32> {
        (0..count)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    let (lhs, rhs) = (values(ROWS * INNER), values(INNER * ROWS));
    let product = Tensor::<B::InnerBackend, 2>::from_data(
        TensorData::new(lhs.clone(), [ROWS, INNER]),
        &device,
    )
    .matmul(Tensor::from_data(
        TensorData::new(rhs.clone(), [INNER, ROWS]),
        &device,
    ))
    .into_data()
    .to_vec::<f32>()
    .unwrap();
    // Against the sum of absolute terms, which bounds the rounding error of any order.
    let mut worst = 0f64;
    for i in 0..ROWS {
        for j in 0..ROWS {
            let terms =
                (0..INNER).map(|k| f64::from(lhs[i * INNER + k]) * f64::from(rhs[k * ROWS + j]));
            let (exact, scale) = terms.fold((0.0, 0.0), |(sum, abs), t| (sum + t, abs + t.abs()));
            worst = worst.max((f64::from(product[i * ROWS + j]) - exact).abs() / scale);
        }
    }
    // Only CUDA's tensor-core kernels round to TF32: elsewhere a regression, not a backend.
    assert!(
        !tf32 || B::name(&device).contains("cuda"),
        "f32 products round to TF32 on {}",
        B::name(&device)
    );
    // f32: a few units of 2^-24 over the terms (under 1e-7 measured); TF32 rounds each input to
    // 2^-11, which these terms' random signs average down (2.8e-5 measured on an H200).
    let bound = if tf32 { 2e-4 } else { 1e-6 };
    println!(
        "f32 products: {} inputs, error {worst:.1e} of the sum of absolute terms",
        if tf32 { "TF32" } else { "f32" }
    );
    assert!(
        worst <= bound,
        "f32 products err by {worst:.2e} of the absolute sum (> {bound:.0e}, TF32: {tf32})"
    );
}

crate::backend_tests!(
    low_precision_products_accumulate_in_f32,
    f32_products_keep_f32_or_tf32_precision
);
