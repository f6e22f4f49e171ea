//! The regression workload of the profiling examples (`diagnose`, `find_batch_size`): synthetic
//! rows that a fixed teacher labels, their Burn batcher, and the model, kiln-ml-testkit's MLP
//! (`Mlp`: the model kiln's trainer tests use) at a configurable width and depth, so its loss
//! falls and its memory grows with the batch.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use kiln_ml_testkit::MlpConfig;
pub use kiln_ml_testkit::{Mlp, RegressionBatch};

/// Input features per sample.
pub const FEATURES: usize = 32;

/// One sample: features and a target.
#[derive(Debug, Clone)]
pub struct Row {
    /// The features.
    pub features: [f32; FEATURES],
    /// The target.
    pub target: f32,
}

impl Row {
    /// Sample `id` of a dataset: deterministic features in [-1, 1) and a teacher's target.
    pub fn synthetic(id: u64) -> Self {
        let mut state = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        let mut features = [0.0; FEATURES];
        for feature in &mut features {
            // SplitMix64: cheap, seeded, and the same on every platform.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            *feature = (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        }
        let target = features
            .iter()
            .enumerate()
            .map(|(index, x)| x * ((index % 7) as f32 - 3.0) / 8.0)
            .sum::<f32>()
            .tanh();
        Self { features, target }
    }
}

/// A batch of rows on `device`.
pub fn batch_of<B: Backend>(rows: &[Row], device: &B::Device) -> RegressionBatch<B> {
    let inputs: Vec<f32> = rows.iter().flat_map(|row| row.features).collect();
    let targets: Vec<f32> = rows.iter().map(|row| row.target).collect();
    RegressionBatch::from_rows(&inputs, &targets, device)
}

/// The Burn batcher the loader's workers run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowBatcher;

impl<B: Backend> Batcher<B, Row, RegressionBatch<B>> for RowBatcher {
    fn batch(&self, rows: Vec<Row>, device: &B::Device) -> RegressionBatch<B> {
        batch_of(&rows, device)
    }
}

/// Forward FLOPs per sample of a [`regressor`] (a multiply-add is two), for throughput and MFU.
pub fn forward_flops_per_sample(width: usize, depth: usize) -> f64 {
    let mut counter = kiln_ml::profile::flops::FlopsCounter::new().linear(FEATURES, width, true);
    for _ in 1..depth.max(1) {
        counter = counter.linear(width, width, true);
    }
    counter.linear(width, 1, true).forward_per_sample()
}

/// The model: `depth` hidden layers of `width` units (ReLU between), one output; weights drawn
/// from a host RNG seeded with `seed`, so runs with the same seed start from the same model.
pub fn regressor<B: Backend>(width: usize, depth: usize, seed: u64, device: &B::Device) -> Mlp<B> {
    MlpConfig::new(FEATURES, &vec![width; depth.max(1)], 1)
        .with_seed(seed)
        .init(device)
}
