//! A multi-modal trajectory forecaster: an MLP that predicts K futures and their scores.

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::activation::softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_ml::metrics::TensorTrajectoryBatch;
use kiln_ml::train::{Autocast, InferenceStep, StepOutput, TrainStep};

use crate::dataset::{FUTURE, HISTORY, Sample};

/// Forecast modes (K).
pub const MODES: usize = 6;

/// History in, K trajectories and K scores out.
#[derive(Module, Debug)]
pub struct Forecaster<B: Backend> {
    encoder: Linear<B>,
    hidden: Linear<B>,
    trajectories: Linear<B>,
    scores: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Forecaster<B> {
    pub fn new(width: usize, device: &B::Device) -> Self {
        Self {
            encoder: LinearConfig::new(2 * HISTORY, width).init(device),
            hidden: LinearConfig::new(width, width).init(device),
            trajectories: LinearConfig::new(width, MODES * FUTURE * 2).init(device),
            scores: LinearConfig::new(width, MODES).init(device),
            activation: Relu::new(),
        }
    }

    /// `[N, 2 HISTORY]` -> (`[N, K, FUTURE, 2]` trajectories, `[N, K]` logits).
    fn forward(&self, history: Tensor<B, 2>) -> (Tensor<B, 4>, Tensor<B, 2>) {
        let agents = history.dims()[0];
        let features = self.activation.forward(self.encoder.forward(history));
        let features = self.activation.forward(self.hidden.forward(features));
        let trajectories = self
            .trajectories
            .forward(features.clone())
            .reshape([agents, MODES, FUTURE, 2]);
        (trajectories, self.scores.forward(features))
    }
}

/// One batch of players on the device.
#[derive(Debug, Clone)]
pub struct PlayerBatch<B: Backend> {
    /// `[N, 2 HISTORY]`
    pub history: Tensor<B, 2>,
    /// `[N, FUTURE, 2]`
    pub future: Tensor<B, 3>,
}

/// Stacks samples into device tensors; runs on the loader's worker threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlayerBatcher;

impl<B: Backend> Batcher<B, Sample, PlayerBatch<B>> for PlayerBatcher {
    fn batch(&self, samples: Vec<Sample>, device: &B::Device) -> PlayerBatch<B> {
        let agents = samples.len();
        let mut history = Vec::with_capacity(agents * 2 * HISTORY);
        let mut future = Vec::with_capacity(agents * 2 * FUTURE);
        for sample in samples {
            history.extend(sample.history);
            future.extend(sample.future);
        }
        PlayerBatch {
            history: Tensor::from_data(TensorData::new(history, [agents, 2 * HISTORY]), device),
            future: Tensor::from_data(TensorData::new(future, [agents, FUTURE, 2]), device),
        }
    }
}

/// Winner-takes-all training: only the closest mode regresses, and the scores learn which mode
/// that is (the usual recipe for multi-modal forecasting, e.g. MultiPath, LaneGCN).
impl<B: AutodiffBackend> TrainStep<B> for Forecaster<B> {
    type Input = PlayerBatch<B>;
    type Output = ();

    fn step(&self, batch: PlayerBatch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let (trajectories, logits) = self.forward(autocast.input(batch.history));
        let (trajectories, logits) = (autocast.full(trajectories), autocast.full(logits));
        StepOutput::new(winner_takes_all(trajectories, logits, batch.future), ())
    }
}

/// The training loss: the closest mode's mean squared displacement, plus half the
/// cross-entropy of the scores against that mode. `[1]`.
pub fn winner_takes_all<B: Backend>(
    trajectories: Tensor<B, 4>,
    logits: Tensor<B, 2>,
    future: Tensor<B, 3>,
) -> Tensor<B, 1> {
    let agents = logits.dims()[0];
    // Mean squared displacement of every mode: [N, K].
    let errors = (trajectories - future.unsqueeze_dim::<4>(1))
        .powi_scalar(2)
        .sum_dim(3)
        .mean_dim(2)
        .reshape([agents, MODES]);
    let best = errors.clone().detach().argmin(1);
    let regression = errors.gather(1, best.clone()).mean();
    let classification = CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, best.reshape([agents]));
    regression + classification.mul_scalar(0.5)
}

impl<B: Backend> Forecaster<B> {
    /// The training loss of a batch in f32, for a hand-written loop (see `plain_loop.rs`).
    pub fn loss(&self, batch: PlayerBatch<B>) -> Tensor<B, 1> {
        let (trajectories, logits) = self.forward(batch.history);
        winner_takes_all(trajectories, logits, batch.future)
    }

    /// K forecasts with softmax probabilities in f32, for a hand-written loop's validation.
    pub fn predict(&self, batch: PlayerBatch<B>) -> TensorTrajectoryBatch<B> {
        InferenceStep::step(self, batch, &Autocast::new(kiln_ml::train::Precision::F32))
    }
}

/// Validation: K trajectories with softmax probabilities, for kiln-ml-metrics on the device.
impl<B: Backend> InferenceStep<B> for Forecaster<B> {
    type Input = PlayerBatch<B>;
    type Output = TensorTrajectoryBatch<B>;

    fn step(&self, batch: PlayerBatch<B>, autocast: &Autocast) -> TensorTrajectoryBatch<B> {
        let (trajectories, logits) = self.forward(autocast.input(batch.history));
        let probabilities = softmax(autocast.full(logits), 1);
        TensorTrajectoryBatch::new(autocast.full(trajectories), batch.future)
            .and_then(|forecast| forecast.with_probabilities(probabilities))
            .expect("the model's output shapes match the ground truth by construction")
    }
}
