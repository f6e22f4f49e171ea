//! A small regression model, its batch and its Burn batcher, shared by the profiling examples
//! (`diagnose`, `find_batch_size`): an MLP of configurable width and depth that learns a
//! fixed random teacher, so its loss falls and its memory grows with the batch.

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_ml::train::{Autocast, StepOutput, TrainStep};

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

/// A batch on the device.
#[derive(Debug, Clone)]
pub struct RowBatch<B: Backend> {
    /// `[batch, FEATURES]`.
    pub inputs: Tensor<B, 2>,
    /// `[batch, 1]`.
    pub targets: Tensor<B, 2>,
}

impl<B: Backend> RowBatch<B> {
    /// Builds a batch from rows on `device`.
    pub fn from_rows(rows: &[Row], device: &B::Device) -> Self {
        let inputs: Vec<f32> = rows.iter().flat_map(|row| row.features).collect();
        let targets: Vec<f32> = rows.iter().map(|row| row.target).collect();
        Self {
            inputs: Tensor::from_data(TensorData::new(inputs, [rows.len(), FEATURES]), device),
            targets: Tensor::from_data(TensorData::new(targets, [rows.len(), 1]), device),
        }
    }
}

/// The Burn batcher the loader's workers run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowBatcher;

impl<B: Backend> Batcher<B, Row, RowBatch<B>> for RowBatcher {
    fn batch(&self, rows: Vec<Row>, device: &B::Device) -> RowBatch<B> {
        RowBatch::from_rows(&rows, device)
    }
}

/// Forward FLOPs per sample of a [`Regressor`] (a multiply-add is two), for throughput and MFU.
pub fn forward_flops_per_sample(width: usize, depth: usize) -> f64 {
    let mut counter = kiln_ml::profile::flops::FlopsCounter::new().linear(FEATURES, width, true);
    for _ in 1..depth.max(1) {
        counter = counter.linear(width, width, true);
    }
    counter.linear(width, 1, true).forward_per_sample()
}

/// An MLP: `depth` hidden layers of `width` units.
#[derive(Module, Debug)]
pub struct Regressor<B: Backend> {
    input: Linear<B>,
    hidden: Vec<Linear<B>>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Regressor<B> {
    /// A seeded-by-the-device's-RNG model.
    pub fn new(width: usize, depth: usize, device: &B::Device) -> Self {
        Self {
            input: LinearConfig::new(FEATURES, width).init(device),
            hidden: (1..depth.max(1))
                .map(|_| LinearConfig::new(width, width).init(device))
                .collect(),
            output: LinearConfig::new(width, 1).init(device),
            activation: Relu::new(),
        }
    }

    fn forward(&self, inputs: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = self.activation.forward(self.input.forward(inputs));
        for layer in &self.hidden {
            x = self.activation.forward(layer.forward(x));
        }
        self.output.forward(x)
    }
}

impl<B: AutodiffBackend> TrainStep<B> for Regressor<B> {
    type Input = RowBatch<B>;
    type Output = ();

    fn step(&self, batch: RowBatch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs)));
        StepOutput::new(
            MseLoss::new().forward(predictions, batch.targets, Reduction::Mean),
            (),
        )
    }
}
