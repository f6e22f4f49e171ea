//! SGD with momentum and weight decay over every parameter at once, as [`FusedAdam`] does
//! Adam: a few kernels per optimizer step, whatever the number of parameter tensors.
//!
//! [`FusedAdam`]: crate::FusedAdam

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::flat_step::{FlatOptimizerState, FlatRule, Saved, flat_step};
use crate::multi_grads::sum_multi_device;

/// The settings of a [`FusedSgd`]: Burn's `SgdConfig` with `MomentumConfig` and
/// `WeightDecayConfig`, field for field.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedSgdConfig {
    /// Momentum, if any: Burn's `MomentumConfig` (PyTorch's `momentum`, `dampening`,
    /// `nesterov`).
    pub momentum: Option<SgdMomentum>,
    /// An L2 penalty added to the gradient, `g + penalty · w`, before the momentum (Burn's
    /// `WeightDecayConfig`, PyTorch's `SGD(weight_decay=)`).
    pub weight_decay: Option<f32>,
}

/// Momentum of a [`FusedSgd`]: `v = momentum · v + (1 − dampening) · g` (`v = g` at the first
/// step), then the update is `v`, or `g + momentum · v` with Nesterov.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SgdMomentum {
    /// The decay of the velocity (Burn's default 0.9).
    pub momentum: f64,
    /// How much of the gradient does not enter the velocity (Burn's default 0.1; PyTorch's 0).
    pub dampening: f64,
    /// Nesterov momentum (default false).
    pub nesterov: bool,
}

impl Default for SgdMomentum {
    /// Burn's `MomentumConfig` defaults: 0.9, dampening 0.1, no Nesterov.
    fn default() -> Self {
        Self {
            momentum: 0.9,
            dampening: 0.1,
            nesterov: false,
        }
    }
}

impl FusedSgdConfig {
    /// Plain SGD: no momentum, no weight decay (Burn's `SgdConfig::new()`).
    pub fn new() -> Self {
        Self {
            momentum: None,
            weight_decay: None,
        }
    }

    /// With momentum (or none).
    pub fn with_momentum(mut self, momentum: Option<SgdMomentum>) -> Self {
        self.momentum = momentum;
        self
    }

    /// With an L2 penalty (or none).
    pub fn with_weight_decay(mut self, penalty: Option<f32>) -> Self {
        self.weight_decay = penalty;
        self
    }

    /// The optimizer, for any module of backend `B`.
    pub fn init<B: AutodiffBackend>(&self) -> FusedSgd<B> {
        FusedSgd {
            config: *self,
            state: FlatOptimizerState::Fresh,
        }
    }
}

impl Default for FusedSgdConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// SGD (with momentum and weight decay) updating every trainable parameter of a module in a
/// few flat buckets: Burn's `Sgd` arithmetic, with [`FusedAdam`](crate::FusedAdam)'s
/// behaviour under the trainer (unscaling and clipping inside the step, parameters kept in
/// buckets) and its differences from Burn's optimizers (a parameter without a gradient is
/// stepped with zeros; one record for the whole module).
#[derive(Clone)]
pub struct FusedSgd<B: AutodiffBackend> {
    config: FusedSgdConfig,
    state: FlatOptimizerState<B::InnerBackend>,
}

/// A [`FusedSgd`]'s state as a Burn record: the step count, the sizes of the parameters in
/// visiting order, and the velocity, one flat tensor per bucket (empty without momentum or
/// before the first step).
#[derive(Record)]
pub struct FusedSgdRecord<B: Backend> {
    time: usize,
    sizes: Vec<usize>,
    velocity: Vec<Tensor<B, 1>>,
}

impl<B: AutodiffBackend> FusedSgd<B> {
    /// The settings.
    pub fn config(&self) -> &FusedSgdConfig {
        &self.config
    }

    /// Steps taken since the state began (0 before the first).
    pub fn steps(&self) -> usize {
        self.state.time()
    }
}

impl<B: Backend> FlatRule<B> for FusedSgdConfig {
    fn moments(&self) -> usize {
        usize::from(self.momentum.is_some())
    }

    fn update(
        &self,
        lr: f64,
        _time: usize,
        param: Tensor<B, 1>,
        mut grad: Tensor<B, 1>,
        moments: Option<Vec<Tensor<B, 1>>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        // Burn's `Sgd::step`: weight decay, then momentum, then the step.
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        let mut kept = Vec::new();
        if let Some(SgdMomentum {
            momentum,
            dampening,
            nesterov,
        }) = self.momentum
        {
            let velocity = match moments.and_then(|mut moments| moments.pop()) {
                Some(velocity) => grad
                    .clone()
                    .mul_scalar(1.0 - dampening)
                    .add(velocity.mul_scalar(momentum)),
                None => grad.clone(),
            };
            grad = if nesterov {
                velocity.clone().mul_scalar(momentum).add(grad)
            } else {
                velocity.clone()
            };
            kept.push(velocity);
        }
        (param - grad.mul_scalar(lr), kept)
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Optimizer<M, B> for FusedSgd<B> {
    type Record = FusedSgdRecord<B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        flat_step::<B, M, _>(&self.config, &mut self.state, "FusedSgd", lr, module, grads)
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        let grads = sum_multi_device::<B, M>(&module, grads);
        self.step(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        let moments = FlatRule::<B::InnerBackend>::moments(&self.config);
        let Saved {
            time,
            sizes,
            moments,
        } = self.state.saved(moments);
        FusedSgdRecord {
            time,
            sizes,
            velocity: moments
                .into_iter()
                .flatten()
                .map(Tensor::from_inner)
                .collect(),
        }
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        let velocity: Vec<_> = record.velocity.into_iter().map(Tensor::inner).collect();
        let moments = if self.config.momentum.is_some() {
            vec![velocity]
        } else {
            Vec::new()
        };
        self.state = FlatOptimizerState::load(Saved {
            time: record.time,
            sizes: record.sizes,
            moments,
        });
        self
    }
}
