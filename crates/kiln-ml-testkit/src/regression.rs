//! A small Burn regression model, its batches and its training step: the model kiln's trainer
//! tests and benches share (feature `train`).
//!
//! Weights and data come from a seeded host RNG, never from the backend's global one (which
//! parallel tests share), so every call with the same seed builds the same model and rows.

use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig, Relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_ml_train::{Autocast, InferenceStep, StepOutput, TrainStep};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Inputs of the teacher that [`teacher_rows`] draws from.
pub const TEACHER_INPUTS: usize = 4;

/// Linear layers with a ReLU (and optionally dropout) between them, ending in one output.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// The hidden layers, then the output layer.
    pub layers: Vec<Linear<B>>,
    /// Between layers.
    pub activation: Relu,
    /// After each hidden activation, when configured.
    pub dropout: Option<Dropout>,
}

/// The shape and initial weights of an [`Mlp`].
#[derive(Debug, Clone, PartialEq)]
pub struct MlpConfig {
    /// Input features.
    pub inputs: usize,
    /// Widths of the hidden layers.
    pub hidden: Vec<usize>,
    /// Output features.
    pub outputs: usize,
    /// Dropout probability after each hidden layer; none by default.
    pub dropout: Option<f64>,
    /// Seed of the host RNG that draws the weights (uniform in ±1/√fan-in, as Burn does).
    pub seed: u64,
}

impl MlpConfig {
    /// `inputs` → `hidden`... → `outputs`, no dropout, seed 1.
    pub fn new(inputs: usize, hidden: &[usize], outputs: usize) -> Self {
        Self {
            inputs,
            hidden: hidden.to_vec(),
            outputs,
            dropout: None,
            seed: 1,
        }
    }

    /// Sets the weight seed.
    pub fn with_seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }

    /// Adds dropout with probability `prob` after each hidden layer.
    pub fn with_dropout(self, prob: f64) -> Self {
        Self {
            dropout: Some(prob),
            ..self
        }
    }

    /// The model on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let widths: Vec<usize> = std::iter::once(self.inputs)
            .chain(self.hidden.iter().copied())
            .chain(std::iter::once(self.outputs))
            .collect();
        let layers = widths
            .windows(2)
            .map(|pair| seeded_linear(pair[0], pair[1], &mut rng, device))
            .collect();
        Mlp {
            layers,
            activation: Relu::new(),
            dropout: self.dropout.map(|prob| DropoutConfig::new(prob).init()),
        }
    }
}

fn seeded_linear<B: Backend>(
    inputs: usize,
    outputs: usize,
    rng: &mut ChaCha8Rng,
    device: &B::Device,
) -> Linear<B> {
    let mut linear = LinearConfig::new(inputs, outputs).init::<B>(device);
    let bound = 1.0 / (inputs as f32).sqrt();
    let weights: Vec<f32> = (0..inputs * outputs)
        .map(|_| rng.random_range(-bound..bound))
        .collect();
    let bias: Vec<f32> = (0..outputs)
        .map(|_| rng.random_range(-bound..bound))
        .collect();
    linear.weight = Param::from_tensor(Tensor::from_data(
        TensorData::new(weights, [inputs, outputs]),
        device,
    ));
    linear.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(bias, [outputs]),
        device,
    )));
    linear
}

impl<B: Backend> Mlp<B> {
    /// The forward pass, in plain Burn.
    pub fn forward(&self, inputs: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        let mut x = inputs;
        for (index, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if index < last {
                x = self.activation.forward(x);
                if let Some(dropout) = &self.dropout {
                    x = dropout.forward(x);
                }
            }
        }
        x
    }

    /// Every float parameter, flattened, as host values (layer by layer, weight then bias).
    pub fn params(&self) -> Vec<f32> {
        let mut values = Vec::new();
        for layer in &self.layers {
            values.extend(layer.weight.val().into_data().iter::<f32>());
            if let Some(bias) = &layer.bias {
                values.extend(bias.val().into_data().iter::<f32>());
            }
        }
        values
    }
}

/// Inputs and targets of one micro-batch.
#[derive(Clone, Debug)]
pub struct RegressionBatch<B: Backend> {
    /// `[rows, features]`.
    pub inputs: Tensor<B, 2>,
    /// `[rows, outputs]`.
    pub targets: Tensor<B, 2>,
}

impl<B: Backend> RegressionBatch<B> {
    /// A batch from host rows (`inputs` row-major, one target per row).
    pub fn from_rows(inputs: &[f32], targets: &[f32], device: &B::Device) -> Self {
        let rows = targets.len();
        let features = inputs.len() / rows.max(1);
        Self {
            inputs: Tensor::from_data(TensorData::new(inputs.to_vec(), [rows, features]), device),
            targets: Tensor::from_data(TensorData::new(targets.to_vec(), [rows, 1]), device),
        }
    }

    /// Rows (samples) in the batch.
    pub fn len(&self) -> usize {
        self.inputs.dims()[0]
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Mean squared error under the trainer's [`Autocast`] policy.
impl<B: AutodiffBackend> TrainStep<B> for Mlp<B> {
    type Input = RegressionBatch<B>;
    type Output = ();

    fn step(&self, batch: RegressionBatch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs)));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
        StepOutput::new(loss, ())
    }
}

/// Validation hands back each sample's squared error, for a `Metric<[f64]>`.
impl<B: Backend> InferenceStep<B> for Mlp<B> {
    type Input = RegressionBatch<B>;
    type Output = Vec<f64>;

    fn step(&self, batch: RegressionBatch<B>, autocast: &Autocast) -> Vec<f64> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs)));
        let errors = (predictions - batch.targets).powi_scalar(2);
        errors.into_data().iter::<f64>().collect()
    }
}

/// `count` rows of a fixed noisy linear teacher over [`TEACHER_INPUTS`] features:
/// `y = w . x + 0.5 + noise`, as (row-major inputs, targets).
pub fn teacher_rows(count: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teacher = [0.5f32, -1.0, 2.0, 0.25];
    let mut inputs = Vec::with_capacity(count * TEACHER_INPUTS);
    let mut targets = Vec::with_capacity(count);
    for _ in 0..count {
        let x: Vec<f32> = (0..TEACHER_INPUTS)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let y = x.iter().zip(teacher).map(|(a, b)| a * b).sum::<f32>()
            + 0.5
            + rng.random_range(-0.05..0.05);
        inputs.extend(x);
        targets.push(y);
    }
    (inputs, targets)
}

/// `count` batches of `size` teacher rows each, from one seeded stream.
pub fn teacher_batches<B: Backend>(
    count: usize,
    size: usize,
    seed: u64,
    device: &B::Device,
) -> Vec<RegressionBatch<B>> {
    let (inputs, targets) = teacher_rows(count * size, seed);
    (0..count)
        .map(|i| {
            RegressionBatch::from_rows(
                &inputs[i * size * TEACHER_INPUTS..(i + 1) * size * TEACHER_INPUTS],
                &targets[i * size..(i + 1) * size],
                device,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn the_same_seed_builds_the_same_model_and_another_seed_does_not() {
        let device = Default::default();
        let config = MlpConfig::new(TEACHER_INPUTS, &[8], 1);
        let a = config.init::<Flex>(&device).params();
        assert_eq!(a, config.init::<Flex>(&device).params());
        assert_ne!(a, config.with_seed(2).init::<Flex>(&device).params());
        assert_eq!(a.len(), 4 * 8 + 8 + 8 + 1);
    }

    #[test]
    fn teacher_batches_have_the_asked_shape() {
        let batches = teacher_batches::<Flex>(3, 5, 7, &Default::default());
        assert_eq!(batches.len(), 3);
        assert!(batches.iter().all(|batch| batch.len() == 5));
        assert_eq!(batches[0].inputs.dims(), [5, TEACHER_INPUTS]);
        let model = MlpConfig::new(TEACHER_INPUTS, &[8, 8], 1).init::<Flex>(&Default::default());
        assert_eq!(model.forward(batches[0].inputs.clone()).dims(), [5, 1]);
    }
}
