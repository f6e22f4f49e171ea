//! An exponential moving average of the weights (timm's `ModelEmaV2`, Lightning's EMA
//! weight averaging): `ema = decay * ema + (1 - decay) * weights` after every N applied
//! optimizer steps, kept beside the master model for validation and export.

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

/// The EMA's settings ([`TrainerConfig::ema`](crate::TrainerConfig::ema)).
///
/// ```
/// use kiln_ml_train::{EmaConfig, TrainerConfig};
///
/// let config = TrainerConfig::new().with_ema(Some(EmaConfig::new(0.999).with_every_steps(4)));
/// assert!(config.validate().is_ok());
/// assert!(TrainerConfig::new().with_ema(Some(EmaConfig::new(1.5))).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmaConfig {
    /// The weight of the old average at each update, in [0, 1) (0.999 is usual; timm's
    /// default 0.9998).
    pub decay: f64,
    /// Update after every this many applied optimizer steps (1: every step).
    #[serde(default = "one")]
    pub every_steps: u64,
}

fn one() -> u64 {
    1
}

impl EmaConfig {
    /// Averages with `decay`, updated every step.
    pub fn new(decay: f64) -> Self {
        Self {
            decay,
            every_steps: 1,
        }
    }

    /// Updates after every `steps` applied optimizer steps.
    pub fn with_every_steps(mut self, steps: u64) -> Self {
        self.every_steps = steps;
        self
    }
}

/// `ema` moved towards `model`'s float parameters by `1 - decay`. The average holds no
/// autodiff graph: its parameters are leaves, trainable where the model's are.
pub(crate) fn ema_update<B: AutodiffBackend, M: AutodiffModule<B>>(
    ema: M,
    model: &M,
    decay: f64,
) -> M {
    // From the inner module: making it flushes each running state's pending update, which
    // visiting the model itself would read one step late.
    let mut collect = Collect::<B::InnerBackend> { values: Vec::new() };
    model.valid().visit(&mut collect);
    ema.map(&mut Blend::<B> {
        values: collect.values.into_iter(),
        decay,
    })
}

/// A copy of `model`'s parameters as the average's starting point, detached from autodiff.
/// It has running statistics of its own (a clone would share the model's, and every update
/// would write the blend into the model's in place), averaged like the weights, as timm's
/// `ModelEmaV2` averages buffers.
pub(crate) fn ema_start<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> M {
    ema_update(crate::independent_copy(model), model, 0.0)
}

/// Every float parameter's value, flattened, in visiting order.
struct Collect<B: Backend> {
    values: Vec<Tensor<B, 1>>,
}

impl<B: Backend> ModuleVisitor<B> for Collect<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        let elements = value.shape().num_elements();
        self.values.push(value.reshape([elements]));
    }
}

/// Blends each float parameter with the collected value of the same position.
struct Blend<B: AutodiffBackend> {
    values: std::vec::IntoIter<Tensor<B::InnerBackend, 1>>,
    decay: f64,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Blend<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let value = self
            .values
            .next()
            .expect("the average and the model have the same parameters, in the same order");
        param.map(|average| {
            // Leaves without a graph, trainable as the model's are (the first average starts
            // from the model's own parameters), so a new trainer can fine-tune the average.
            let trainable = average.is_require_grad();
            let dims: [usize; D] = average.dims();
            let value = value.reshape(dims);
            let blended = if self.decay == 0.0 {
                value
            } else {
                average.inner().mul_scalar(self.decay) + value.mul_scalar(1.0 - self.decay)
            };
            Tensor::from_inner(blended).set_require_grad(trainable)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};

    type B = Autodiff<Flex>;

    fn weights(linear: &Linear<B>) -> Vec<f32> {
        linear.weight.val().into_data().to_vec().unwrap()
    }

    #[test]
    fn the_average_moves_towards_the_model_by_one_minus_decay() {
        let device = Default::default();
        let model = LinearConfig::new(3, 2).init::<B>(&device);
        crate::materialize(&model);
        assert!(model.weight.val().is_require_grad());
        let start = weights(&model);
        let ema = ema_start(&model);
        assert_eq!(weights(&ema), start);
        // A leaf with no history, trainable as the model's weight is.
        assert!(ema.weight.val().is_require_grad());
        // The model moves by +1 everywhere; the average follows by a tenth.
        let moved = model.clone().map(&mut AddOne);
        let ema = ema_update(ema, &moved, 0.9);
        let now = weights(&moved);
        for ((average, before), now) in weights(&ema).iter().zip(&start).zip(&now) {
            assert!((average - (0.9 * before + 0.1 * now)).abs() < 1e-6);
        }
        assert_eq!(weights(&model), start, "the model is left as it is");
    }

    struct AddOne;
    impl ModuleMapper<B> for AddOne {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|tensor| tensor.add_scalar(1.0))
        }
    }
}
