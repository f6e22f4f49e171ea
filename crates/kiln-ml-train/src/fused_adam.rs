//! Adam and AdamW over every parameter at once: a few kernels per optimizer step, whatever the
//! number of parameter tensors.
//!
//! Burn's `Adam` and `AdamW` update each parameter tensor on its own, with about a dozen
//! element-wise operations each, so a model of many small tensors pays a launch for each (on a
//! GPU the step then waits on launches, not arithmetic). [`FusedAdam`] flattens every trainable
//! parameter and its gradient into a few large buckets (the ones the data-parallel all-reduce
//! uses, 2^25 elements) and runs the update once per bucket, as PyTorch's `foreach` and `fused`
//! Adam do. The arithmetic is Burn's, operation for operation, so the two agree to float
//! rounding; the moments live as flat buckets and are saved in checkpoints as such.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::buckets::{ReplaceParams, bucket_ranges, concat, split};

/// How [`FusedAdam`] decays the weights.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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
            state: None,
        }
    }
}

/// Adam or AdamW updating every trainable parameter of a module in a few flat buckets: one
/// [`Optimizer`] for [`Trainer`](crate::Trainer) (or any Burn loop) in place of Burn's `Adam`
/// or `AdamW`, with the same arithmetic.
///
/// Differences from Burn's optimizers: a trainable parameter without a gradient in a step is
/// stepped with a zero gradient (its moments decay and Adam may still move it), where Burn's
/// leave it alone, as under kiln's data parallelism; and the state is one record for the whole
/// module (a checkpoint of Burn's `Adam` does not load into it, nor the reverse).
#[derive(Clone)]
pub struct FusedAdam<B: AutodiffBackend> {
    config: FusedAdamConfig,
    state: Option<Moments<B::InnerBackend>>,
}

/// The step count and the moments, bucket by bucket, with the parameter sizes they were laid
/// out for.
#[derive(Clone)]
struct Moments<B: Backend> {
    time: usize,
    sizes: Vec<usize>,
    first: Vec<Tensor<B, 1>>,
    second: Vec<Tensor<B, 1>>,
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
        self.state.as_ref().map_or(0, |state| state.time)
    }

    /// The update of one bucket: the new parameters and moments.
    fn update_bucket(
        &self,
        lr: LearningRate,
        time: usize,
        param: Tensor<B::InnerBackend, 1>,
        mut grad: Tensor<B::InnerBackend, 1>,
        moments: Option<BucketMoments<B::InnerBackend>>,
    ) -> [Tensor<B::InnerBackend, 1>; 3] {
        let FusedAdamConfig {
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
        } = self.config;
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
        [updated, first, second]
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Optimizer<M, B> for FusedAdam<B> {
    type Record = FusedAdamRecord<B>;

    fn step(&mut self, lr: LearningRate, module: M, mut grads: GradientsParams) -> M {
        let mut gather = Gather::<B> {
            grads: &mut grads,
            params: Vec::new(),
            grads_flat: Vec::new(),
            sizes: Vec::new(),
        };
        module.visit(&mut gather);
        let Gather {
            params,
            grads_flat,
            sizes,
            ..
        } = gather;
        if sizes.is_empty() {
            return module;
        }
        let ranges = bucket_ranges(&sizes);
        let (time, moments) = match continued(self.state.take(), &sizes, &ranges) {
            Some((time, moments)) => (time + 1, moments.into_iter().map(Some).collect()),
            None => (1, vec![None; ranges.len()]),
        };
        let (mut params, mut grads_flat) = (params.into_iter(), grads_flat.into_iter());
        let (mut pieces, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
        for (range, bucket_moments) in ranges.into_iter().zip(moments) {
            let param = concat(params.by_ref().take(range.len()).collect());
            let grad = concat(grads_flat.by_ref().take(range.len()).collect());
            let [updated, new_first, new_second] =
                self.update_bucket(lr, time, param, grad, bucket_moments);
            pieces.extend(split(updated, &sizes[range]));
            first.push(new_first);
            second.push(new_second);
        }
        self.state = Some(Moments {
            time,
            sizes,
            first,
            second,
        });
        module.map(&mut ReplaceParams::<B> {
            pieces: pieces.into_iter(),
            trainable_only: true,
        })
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, mut grads: MultiGradientsParams) -> M {
        let mut collect = CollectMulti::<B> {
            grads: &mut grads,
            out: GradientsParams::new(),
            backend: std::marker::PhantomData,
        };
        module.visit(&mut collect);
        let single = collect.out;
        self.step(lr, module, single)
    }

    fn to_record(&self) -> Self::Record {
        let to_outer = |tensors: &[Tensor<B::InnerBackend, 1>]| {
            tensors.iter().cloned().map(Tensor::from_inner).collect()
        };
        match &self.state {
            Some(state) => FusedAdamRecord {
                time: state.time,
                sizes: state.sizes.clone(),
                first: to_outer(&state.first),
                second: to_outer(&state.second),
            },
            None => FusedAdamRecord {
                time: 0,
                sizes: Vec::new(),
                first: Vec::new(),
                second: Vec::new(),
            },
        }
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        let to_inner =
            |tensors: Vec<Tensor<B, 1>>| tensors.into_iter().map(Tensor::inner).collect();
        self.state = (record.time > 0).then(|| Moments {
            time: record.time,
            sizes: record.sizes,
            first: to_inner(record.first),
            second: to_inner(record.second),
        });
        self
    }
}

/// A bucket's first and second moments.
type BucketMoments<B> = (Tensor<B, 1>, Tensor<B, 1>);

/// The step count and the moments of `previous`, bucket by bucket as `ranges` groups `sizes`;
/// `None` (the moments restart) before the first step, and, with a warning, when the trainable
/// parameters changed (a layer frozen or unfrozen) or the saved moments do not cover them.
fn continued<B: Backend>(
    previous: Option<Moments<B>>,
    sizes: &[usize],
    ranges: &[std::ops::Range<usize>],
) -> Option<(usize, Vec<BucketMoments<B>>)> {
    let previous = previous?;
    if previous.sizes != sizes {
        log::warn!(
            "FusedAdam: the trainable parameters changed ({} tensors, {} elements, were {} and \
             {}): Adam's moments restart",
            sizes.len(),
            sizes.iter().sum::<usize>(),
            previous.sizes.len(),
            previous.sizes.iter().sum::<usize>()
        );
        return None;
    }
    let lengths: Vec<usize> = ranges
        .iter()
        .map(|range| sizes[range.clone()].iter().sum())
        .collect();
    let fits = |moments: &[Tensor<B, 1>]| {
        moments.len() == lengths.len()
            && moments
                .iter()
                .zip(&lengths)
                .all(|(moment, length)| moment.dims()[0] == *length)
    };
    let total = |moments: &[Tensor<B, 1>]| moments.iter().map(|m| m.dims()[0]).sum::<usize>();
    let expected: usize = lengths.iter().sum();
    let (first, second) = if fits(&previous.first) && fits(&previous.second) {
        (previous.first, previous.second)
    } else if total(&previous.first) == expected && total(&previous.second) == expected {
        // Saved with other buckets: the same elements, cut again.
        (
            split(concat(previous.first), &lengths),
            split(concat(previous.second), &lengths),
        )
    } else {
        log::warn!(
            "FusedAdam: the saved moments ({} and {} elements) do not cover the {expected} \
             elements of the parameters: Adam's moments restart",
            total(&previous.first),
            total(&previous.second)
        );
        return None;
    };
    Some((previous.time, first.into_iter().zip(second).collect()))
}

/// Every trainable float parameter, flattened, with its gradient (zeros without one).
struct Gather<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    params: Vec<Tensor<B::InnerBackend, 1>>,
    grads_flat: Vec<Tensor<B::InnerBackend, 1>>,
    sizes: Vec<usize>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Gather<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let elements = value.shape().num_elements();
        let value = value.inner().reshape([elements]);
        let grad = match self.grads.remove::<B::InnerBackend, D>(param.id) {
            Some(grad) => grad.reshape([elements]),
            None => value.zeros_like(),
        };
        self.params.push(value);
        self.grads_flat.push(grad);
        self.sizes.push(elements);
    }
}

/// The gradients of several devices summed per parameter, on the parameter's device (as
/// Burn's optimizers do with `MultiGradientsParams`).
struct CollectMulti<'a, B: AutodiffBackend> {
    grads: &'a mut MultiGradientsParams,
    out: GradientsParams,
    backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for CollectMulti<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((grad, _device)) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let grad = grad.to_device(&param.val().device());
            self.out.register::<B::InnerBackend, D>(param.id, grad);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type B = Flex;

    fn tensor(values: Vec<f32>) -> Tensor<B, 1> {
        Tensor::from_data(TensorData::from(values.as_slice()), &Default::default())
    }

    fn moments(sizes: Vec<usize>, buckets: &[usize]) -> Moments<B> {
        let bucket = |offset: f32| {
            buckets
                .iter()
                .map(|&length| tensor((0..length).map(|i| offset + i as f32).collect()))
                .collect()
        };
        Moments {
            time: 7,
            sizes,
            first: bucket(0.0),
            second: bucket(100.0),
        }
    }

    fn values(tensor: Tensor<B, 1>) -> Vec<f32> {
        tensor.into_data().to_vec().unwrap()
    }

    #[test]
    fn moments_continue_only_for_the_parameters_they_were_made_for() {
        let sizes = [2, 3];
        // Both parameters in one bucket.
        let one_bucket = bucket_ranges(&sizes);
        assert_eq!(one_bucket.len(), 1);
        assert!(continued::<B>(None, &sizes, &one_bucket).is_none());

        let (time, kept) = continued(Some(moments(vec![2, 3], &[5])), &sizes, &one_bucket).unwrap();
        assert_eq!(time, 7);
        assert_eq!(kept.len(), 1);
        assert_eq!(values(kept[0].0.clone()), [0.0, 1.0, 2.0, 3.0, 4.0]);

        // Saved in two buckets, continued in one: the same elements, cut again.
        let (_, recut) =
            continued(Some(moments(vec![2, 3], &[2, 3])), &sizes, &one_bucket).unwrap();
        assert_eq!(recut.len(), 1);
        assert_eq!(
            values(recut[0].1.clone()),
            [100.0, 101.0, 100.0, 101.0, 102.0]
        );

        // A layer frozen or unfrozen, or moments that do not cover the parameters: a restart.
        assert!(continued(Some(moments(vec![2], &[2])), &sizes, &one_bucket).is_none());
        assert!(continued(Some(moments(vec![2, 3], &[4])), &sizes, &one_bucket).is_none());
    }
}
