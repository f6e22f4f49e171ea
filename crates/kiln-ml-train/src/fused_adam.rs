//! Adam and AdamW over every parameter at once: a few kernels per optimizer step, whatever the
//! number of parameter tensors.
//!
//! Burn's `Adam` and `AdamW` update each parameter tensor on its own, with about a dozen
//! element-wise operations each, so a model of many small tensors pays a launch for each (on a
//! GPU the step then waits on launches, not arithmetic). [`FusedAdam`] updates flat buckets of
//! every trainable parameter instead (see `flat_step`), as PyTorch's `foreach` and `fused` Adam
//! do. The arithmetic is Burn's, operation for operation, so the two agree to float rounding;
//! the moments live as flat buckets and are saved in checkpoints as such.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::flat_step::{FlatOptimizerState, FlatRule, Saved, flat_step};
use crate::multi_grads::sum_multi_device;

/// How [`FusedAdam`] decays the weights.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AdamWeightDecay {
    /// An L2 penalty added to the gradient, `g + penalty · w` (Burn's `AdamConfig` with
    /// `WeightDecayConfig`, PyTorch's `Adam(weight_decay=)`).
    L2 {
        /// The penalty.
        penalty: f32,
    },
    /// Decoupled decay, `w · (1 − lr · rate)` before the update (AdamW: Burn's `AdamWConfig`,
    /// PyTorch's `AdamW`).
    Decoupled {
        /// The decay rate, multiplied by the learning rate.
        rate: f32,
    },
}

/// The settings of a [`FusedAdam`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedAdamConfig {
    /// The decay of the first moment.
    pub beta_1: f32,
    /// The decay of the second moment.
    pub beta_2: f32,
    /// Added to the root of the second moment.
    pub epsilon: f32,
    /// Weight decay, if any.
    pub weight_decay: Option<AdamWeightDecay>,
}

impl FusedAdamConfig {
    /// Adam with Burn's `AdamConfig` defaults: betas 0.9 and 0.999, epsilon 1e-5, no decay.
    pub fn adam() -> Self {
        Self {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay: None,
        }
    }

    /// AdamW with Burn's `AdamWConfig` defaults: betas 0.9 and 0.999, epsilon 1e-5 (PyTorch's
    /// is 1e-8), decoupled decay at 1e-4.
    pub fn adamw() -> Self {
        Self {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay: Some(AdamWeightDecay::Decoupled { rate: 1e-4 }),
        }
    }

    /// With the moments' decays.
    pub fn with_betas(mut self, beta_1: f32, beta_2: f32) -> Self {
        self.beta_1 = beta_1;
        self.beta_2 = beta_2;
        self
    }

    /// With `epsilon`.
    pub fn with_epsilon(mut self, epsilon: f32) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// With weight decay (or none).
    pub fn with_weight_decay(mut self, weight_decay: Option<AdamWeightDecay>) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// The optimizer, for any module of backend `B`.
    pub fn init<B: AutodiffBackend>(&self) -> FusedAdam<B> {
        FusedAdam {
            config: *self,
            state: FlatOptimizerState::Fresh,
        }
    }
}

/// Adam or AdamW updating every trainable parameter of a module in a few flat buckets: one
/// [`Optimizer`] for [`Trainer`](crate::Trainer) (or any Burn loop) in place of Burn's `Adam`
/// or `AdamW`, with the same arithmetic.
///
/// Under the [`Trainer`](crate::Trainer) it also does the trainer's gradient unscaling and
/// global-norm clipping inside its step (one reduction over the buckets) and keeps the
/// parameters in its buckets between steps, so a step copies only the gradients; in a loop of
/// your own each step copies the parameters in as well.
///
/// Differences from Burn's optimizers: a trainable parameter without a gradient in a step is
/// stepped with a zero gradient (its moments decay and Adam may still move it), where Burn's
/// leave it alone, as under kiln's data parallelism; and the state is one record for the whole
/// module (a checkpoint of Burn's `Adam` does not load into it, nor the reverse).
#[derive(Clone)]
pub struct FusedAdam<B: AutodiffBackend> {
    config: FusedAdamConfig,
    pub(crate) state: FlatOptimizerState<B::InnerBackend>,
}

/// A [`FusedAdam`]'s state as a Burn record: the step count, the sizes of the parameters in
/// visiting order, and the first and second moments, one flat tensor per bucket (all empty
/// before the first step).
#[derive(Record)]
pub struct FusedAdamRecord<B: Backend> {
    time: usize,
    sizes: Vec<usize>,
    first: Vec<Tensor<B, 1>>,
    second: Vec<Tensor<B, 1>>,
}

impl<B: AutodiffBackend> FusedAdam<B> {
    /// The settings.
    pub fn config(&self) -> &FusedAdamConfig {
        &self.config
    }

    /// Steps taken since the state began (0 before the first).
    pub fn steps(&self) -> usize {
        self.state.time()
    }
}

impl<B: Backend> FlatRule<B> for FusedAdamConfig {
    fn moments(&self) -> usize {
        2
    }

    fn update(
        &self,
        lr: f64,
        time: usize,
        param: Tensor<B, 1>,
        mut grad: Tensor<B, 1>,
        moments: Option<Vec<Tensor<B, 1>>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        let moments = moments.map(|moments| {
            let [first, second]: [Tensor<B, 1>; 2] =
                moments.try_into().expect("Adam keeps two moments");
            (first, second)
        });
        let FusedAdamConfig {
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
        } = *self;
        if let Some(AdamWeightDecay::L2 { penalty }) = weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        // Burn's `AdaptiveMomentum`, operation for operation.
        let (first, second) = match moments {
            Some((first, second)) => (
                first
                    .mul_scalar(beta_1)
                    .add(grad.clone().mul_scalar(1.0 - beta_1)),
                second
                    .mul_scalar(beta_2)
                    .add(grad.square().mul_scalar(1.0 - beta_2)),
            ),
            None => (
                grad.clone().mul_scalar(1.0 - beta_1),
                grad.square().mul_scalar(1.0 - beta_2),
            ),
        };
        let time = time as i32;
        let updated = match weight_decay {
            Some(AdamWeightDecay::Decoupled { rate }) => {
                // Burn's `AdamW`: bias-corrected moments, then the decayed weights.
                let first_corrected = first.clone().div_scalar(1f32 - beta_1.powi(time));
                let second_corrected = second.clone().div_scalar(1f32 - beta_2.powi(time));
                let raw_delta = first_corrected.div(second_corrected.sqrt().add_scalar(epsilon));
                let decay_rate = lr * f64::from(rate);
                param.mul_scalar(1.0 - decay_rate) - raw_delta.mul_scalar(lr)
            }
            _ => {
                // Burn's `Adam`: the bias corrections folded into two scalars.
                let correction_2 = (1.0 - beta_2.powi(time)).sqrt();
                let factor = correction_2 / (1.0 - beta_1.powi(time));
                let direction = first
                    .clone()
                    .mul_scalar(factor)
                    .div(second.clone().sqrt().add_scalar(epsilon * correction_2));
                param - direction.mul_scalar(lr)
            }
        };
        (updated, vec![first, second])
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Optimizer<M, B> for FusedAdam<B> {
    type Record = FusedAdamRecord<B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        flat_step::<B, M, _>(
            &self.config,
            &mut self.state,
            "FusedAdam",
            lr,
            module,
            grads,
        )
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        let grads = sum_multi_device::<B, M>(&module, grads);
        self.step(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        let Saved {
            time,
            sizes,
            moments,
        } = self.state.saved(2);
        let [first, second]: [Vec<Tensor<B::InnerBackend, 1>>; 2] =
            moments.try_into().expect("Adam keeps two moments");
        let to_outer =
            |tensors: Vec<Tensor<B::InnerBackend, 1>>| tensors.into_iter().map(Tensor::from_inner);
        FusedAdamRecord {
            time,
            sizes,
            first: to_outer(first).collect(),
            second: to_outer(second).collect(),
        }
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        let to_inner =
            |tensors: Vec<Tensor<B, 1>>| tensors.into_iter().map(Tensor::inner).collect();
        self.state = FlatOptimizerState::load(Saved {
            time: record.time,
            sizes: record.sizes,
            moments: vec![to_inner(record.first), to_inner(record.second)],
        });
        self
    }
}
