//! A small MLP regression model, seeded data and helpers shared by the trainer tests.

use std::sync::Arc;

use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_core::{Event, StepReport};
use kiln_testkit::RecordingObserver;
use kiln_train::{Autocast, InferenceStep, StepOutput, TrainStep};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const INPUTS: usize = 4;
pub const HIDDEN: usize = 8;

/// Two linear layers with a ReLU between them.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub hidden: Linear<B>,
    pub output: Linear<B>,
    pub activation: Relu,
}

/// Inputs and targets of one micro-batch.
#[derive(Clone, Debug)]
pub struct Batch<B: Backend> {
    pub inputs: Tensor<B, 2>,
    pub targets: Tensor<B, 2>,
}

impl<B: Backend> Mlp<B> {
    pub fn forward(&self, inputs: Tensor<B, 2>) -> Tensor<B, 2> {
        self.output
            .forward(self.activation.forward(self.hidden.forward(inputs)))
    }
}

impl<B: AutodiffBackend> TrainStep<B> for Mlp<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs)));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
        StepOutput::new(loss, ())
    }

    fn batch_samples(&self, batch: &Batch<B>) -> u64 {
        batch.inputs.dims()[0] as u64
    }
}

/// Validation hands back each sample's squared error, for a `Metric<[f64]>`.
impl<B: Backend> InferenceStep<B> for Mlp<B> {
    type Input = Batch<B>;
    type Output = Vec<f64>;

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> Vec<f64> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs)));
        let errors = (predictions - batch.targets).powi_scalar(2);
        errors.into_data().iter::<f64>().collect()
    }
}

/// A model with weights drawn from a host RNG (not the backend's global one, which parallel
/// tests share), so every call with the same seed gives the same weights.
pub fn model<B: Backend>(device: &B::Device, seed: u64) -> Mlp<B> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut layer = |inputs: usize, outputs: usize| {
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
    };
    Mlp {
        hidden: layer(INPUTS, HIDDEN),
        output: layer(HIDDEN, 1),
        activation: Relu::new(),
    }
}

/// A trainer of `model(device, 1)` with plain SGD at a constant learning rate.
pub fn sgd_trainer<B: AutodiffBackend>(
    device: &B::Device,
    learning_rate: f64,
    config: kiln_train::TrainerConfig,
) -> kiln_train::Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B> + use<B>, f64> {
    kiln_train::Trainer::new(
        model::<B>(device, 1),
        burn::optim::SgdConfig::new().init(),
        learning_rate,
        config,
        device.clone(),
    )
    .unwrap()
}

/// Rows of a fixed noisy linear teacher: `y = w . x + 0.5 + noise`.
pub fn rows(count: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teacher = [0.5f32, -1.0, 2.0, 0.25];
    let mut inputs = Vec::with_capacity(count * INPUTS);
    let mut targets = Vec::with_capacity(count);
    for _ in 0..count {
        let x: Vec<f32> = (0..INPUTS).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y = x.iter().zip(teacher).map(|(a, b)| a * b).sum::<f32>()
            + 0.5
            + rng.random_range(-0.05..0.05);
        inputs.extend(x);
        targets.push(y);
    }
    (inputs, targets)
}

/// A batch from host rows.
pub fn batch<B: Backend>(inputs: &[f32], targets: &[f32], device: &B::Device) -> Batch<B> {
    let rows = targets.len();
    Batch {
        inputs: Tensor::from_data(TensorData::new(inputs.to_vec(), [rows, INPUTS]), device),
        targets: Tensor::from_data(TensorData::new(targets.to_vec(), [rows, 1]), device),
    }
}

/// `count` batches of `size` rows each, from one seeded stream.
pub fn batches<B: Backend>(
    count: usize,
    size: usize,
    seed: u64,
    device: &B::Device,
) -> Vec<Batch<B>> {
    let (inputs, targets) = rows(count * size, seed);
    (0..count)
        .map(|i| {
            batch(
                &inputs[i * size * INPUTS..(i + 1) * size * INPUTS],
                &targets[i * size..(i + 1) * size],
                device,
            )
        })
        .collect()
}

/// Every float parameter of a model, flattened, as host values.
pub fn params<B: Backend>(model: &Mlp<B>) -> Vec<f32> {
    let mut values = Vec::new();
    for linear in [&model.hidden, &model.output] {
        values.extend(linear.weight.val().into_data().iter::<f32>());
        if let Some(bias) = &linear.bias {
            values.extend(bias.val().into_data().iter::<f32>());
        }
    }
    values
}

/// The largest absolute difference between two parameter lists.
pub fn max_abs_diff(left: &[f32], right: &[f32]) -> f32 {
    assert_eq!(left.len(), right.len());
    left.iter()
        .zip(right)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

/// The step reports an observer saw.
pub fn step_reports(observer: &RecordingObserver) -> Vec<StepReport> {
    observer
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::Step(report) => Some(report),
            _ => None,
        })
        .collect()
}

/// A recorder to hand to a trainer while keeping access to it.
pub fn recorder() -> Arc<RecordingObserver> {
    Arc::new(RecordingObserver::new())
}

/// The mixed precisions the device runs (flex and CUDA: both; lavapipe: f16 only), checking
/// that `Trainer::new` refuses the others with a named error.
pub fn mixed_precisions<B: AutodiffBackend>(device: &B::Device) -> Vec<kiln_train::Precision> {
    use kiln_train::Precision;
    let supported: Vec<Precision> = [Precision::F16Mixed, Precision::Bf16Mixed]
        .into_iter()
        .filter(|precision| match precision.check_supported::<B>(device) {
            Ok(()) => true,
            Err(error) => {
                let config = kiln_train::TrainerConfig::new().with_precision(*precision);
                let refused = kiln_train::Trainer::new(
                    model::<B>(device, 1),
                    burn::optim::SgdConfig::new().init(),
                    0.1,
                    config,
                    device.clone(),
                );
                assert!(
                    matches!(refused, Err(kiln_train::Error::UnsupportedPrecision { .. })),
                    "{precision} must be refused: {error}"
                );
                false
            }
        })
        .collect();
    assert!(!supported.is_empty(), "every kiln device runs f16 or bf16");
    supported
}

/// Declares each backend-generic test body for flex; with the `wgpu` feature for Burn's wgpu
/// backend on a Vulkan adapter (lavapipe in CI; skipped with a note when there is none, a
/// failure with `KILN_REQUIRE_GPU=1`); and with the `cuda` feature for CUDA, ignored unless
/// asked for (`-- --ignored`), since no CI machine has a GPU.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod flex {
            $(
                #[test]
                fn $name() {
                    super::$name::<burn::backend::Autodiff<burn::backend::Flex>>(Default::default());
                }
            )*
        }
        #[cfg(feature = "wgpu")]
        mod wgpu {
            $(
                #[test]
                fn $name() {
                    if let Some(device) = kiln_testkit::wgpu_device() {
                        super::$name::<burn::backend::Autodiff<burn::backend::Wgpu>>(device);
                    }
                }
            )*
        }
        #[cfg(feature = "cuda")]
        mod cuda {
            $(
                #[test]
                #[ignore = "needs a CUDA driver and device: run with `--features cuda -- --ignored`"]
                fn $name() {
                    super::$name::<burn::backend::Autodiff<burn::backend::Cuda>>(Default::default());
                }
            )*
        }
    };
}
