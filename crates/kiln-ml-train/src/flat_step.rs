//! One optimizer step over every trainable parameter at once: the engine of kiln's fused
//! optimizers ([`FusedAdam`](crate::FusedAdam), [`FusedSgd`](crate::FusedSgd)).
//!
//! A step lays the gradients out in a few flat, zero-padded buckets ([`Layout`]), multiplies
//! them by the trainer's unscale factor and clips them by their global norm (one reduction per
//! bucket, the coefficient computed on the device), updates each bucket with the optimizer's
//! rule in one pass of element-wise operations (which Burn's fusion turns into one kernel),
//! and hands the module views of the new buckets. Under the [`Trainer`](crate::Trainer) the
//! parameter buckets are kept from one step to the next, so only the gradients are copied into
//! buckets; used on its own, a step also copies the parameters in.

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::buckets::{ReplaceParams, concat, split};
use crate::clipping::{clip_factor_on_device, sum_of_squares};
use crate::flat_layout::Layout;
use crate::step_hints::{self, StepHints};

/// An optimizer's update of one flat bucket.
pub(crate) trait FlatRule<B: Backend> {
    /// How many state tensors the rule keeps per bucket (Adam: 2, SGD with momentum: 1).
    fn moments(&self) -> usize;

    /// The bucket's new parameters and state, at step `time` (1 for the first), from its
    /// parameters, its (scaled, clipped) gradients and its state before (`None` at first).
    fn update(
        &self,
        lr: f64,
        time: usize,
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        moments: Option<Vec<Tensor<B, 1>>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>);
}

/// A fused optimizer's state between steps.
#[derive(Clone)]
pub(crate) struct FlatState<B: Backend> {
    /// Steps taken.
    pub(crate) time: usize,
    pub(crate) layout: Layout,
    /// The rule's state, `[moment][bucket]`, padded as the layout says.
    pub(crate) moments: Vec<Vec<Tensor<B, 1>>>,
    /// The parameter buckets the last step handed out, while the trainer vouches for them.
    kept: Option<Kept<B>>,
}

/// Parameter buckets kept between steps, with the trainer's model generation they belong to.
#[derive(Clone)]
struct Kept<B: Backend> {
    generation: u64,
    buckets: Vec<Tensor<B, 1>>,
}

/// A fused optimizer's state as its record keeps it: the step count, the parameters' element
/// counts, and each moment as unpadded buckets (`[moment][bucket]`).
#[derive(Clone)]
pub(crate) struct Saved<B: Backend> {
    pub(crate) time: usize,
    pub(crate) sizes: Vec<usize>,
    pub(crate) moments: Vec<Vec<Tensor<B, 1>>>,
}

/// A fused optimizer's state: none yet, loaded from a record (laid out at the next step), or
/// live.
#[derive(Clone, Default)]
pub(crate) enum FlatOptimizerState<B: Backend> {
    #[default]
    Fresh,
    Loaded(Saved<B>),
    Live(FlatState<B>),
}

impl<B: Backend> FlatOptimizerState<B> {
    /// Steps taken.
    pub(crate) fn time(&self) -> usize {
        match self {
            FlatOptimizerState::Fresh => 0,
            FlatOptimizerState::Loaded(saved) => saved.time,
            FlatOptimizerState::Live(state) => state.time,
        }
    }

    /// The state as a record keeps it (`moments` empty lists before the first step).
    pub(crate) fn saved(&self, moments: usize) -> Saved<B> {
        match self {
            FlatOptimizerState::Fresh => Saved {
                time: 0,
                sizes: Vec::new(),
                moments: vec![Vec::new(); moments],
            },
            FlatOptimizerState::Loaded(saved) => saved.clone(),
            FlatOptimizerState::Live(state) => Saved {
                time: state.time,
                sizes: state.layout.sizes.clone(),
                moments: state
                    .moments
                    .iter()
                    .map(|buckets| state.layout.unpad(buckets))
                    .collect(),
            },
        }
    }

    /// The state of a record (nothing before the first step).
    pub(crate) fn load(saved: Saved<B>) -> Self {
        if saved.time == 0 {
            FlatOptimizerState::Fresh
        } else {
            FlatOptimizerState::Loaded(saved)
        }
    }
}

/// One fused step of `rule` on `module` (see the module docs); `name` names the optimizer in
/// warnings.
pub(crate) fn flat_step<B, M, R>(
    rule: &R,
    state: &mut FlatOptimizerState<B::InnerBackend>,
    name: &str,
    lr: f64,
    module: M,
    mut grads: GradientsParams,
) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    R: FlatRule<B::InnerBackend>,
{
    let hints = step_hints::take();
    // Under the trainer the kept buckets are the parameters: the module's values are gathered
    // only when they may be copied in (no reshape per parameter on the trainer's hot path).
    let reuses_kept = match (&*state, hints) {
        (FlatOptimizerState::Live(live), Some(hints)) => live
            .kept
            .as_ref()
            .is_some_and(|kept| kept.generation == hints.generation),
        _ => false,
    };
    // Gradients the trainer already laid out in buckets (to read their norm before the step)
    // have left `grads`: they come with the hints.
    let bucketed = hints.and_then(|_| step_hints::take_grads::<BucketedGrads<B::InnerBackend>>());
    let Gathered {
        device,
        ids,
        sizes,
        values,
        grads: grads_flat,
    } = gather(&module, &mut grads, !reuses_kept);
    let Some(device) = device else {
        return module;
    };
    if let Some(bucketed) = &bucketed {
        assert!(
            bucketed.layout.ids == ids && bucketed.layout.sizes == sizes,
            "{name}: the trainer bucketed the gradients of other parameters than the module's"
        );
    }

    let (layout, time, moments, kept) = match std::mem::take(state) {
        FlatOptimizerState::Live(previous)
            if previous.layout.ids == ids && previous.layout.sizes == sizes =>
        {
            (
                previous.layout,
                previous.time,
                Some(previous.moments),
                previous.kept,
            )
        }
        FlatOptimizerState::Live(previous) => {
            log::warn!(
                "{name}: the trainable parameters changed ({} tensors, {} elements, were {} and \
                 {}): the optimizer's state restarts",
                sizes.len(),
                sizes.iter().sum::<usize>(),
                previous.layout.sizes.len(),
                previous.layout.sizes.iter().sum::<usize>()
            );
            (Layout::new(ids, sizes), 0, None, None)
        }
        FlatOptimizerState::Loaded(saved) => {
            let layout = Layout::new(ids, sizes);
            match restore(saved, &layout, rule.moments(), &device, name) {
                Some((time, moments)) => (layout, time, Some(moments), None),
                None => (layout, 0, None, None),
            }
        }
        FlatOptimizerState::Fresh => (Layout::new(ids, sizes), 0, None, None),
    };

    // The parameter buckets of the last step, when the trainer says its model has not changed
    // since; otherwise the module's parameters, copied in.
    let params = match (kept, hints) {
        (Some(kept), Some(hints)) if kept.generation == hints.generation => kept.buckets,
        _ => {
            // Not gathered above when the kept buckets were dropped since (new parameters).
            let values = if values.is_empty() {
                gather(&module, &mut GradientsParams::new(), true).values
            } else {
                values
            };
            layout.pad(values.into_iter().map(Some).collect(), &device)
        }
    };
    let grads = match bucketed {
        Some(bucketed) => bucketed.buckets,
        None => layout.pad(grads_flat, &device),
    };
    let grads = scaled(grads, hints);

    let time = time + 1;
    let mut per_bucket = transpose(moments, layout.ranges.len());
    let mut new_params = Vec::with_capacity(params.len());
    let mut new_moments = vec![Vec::with_capacity(params.len()); rule.moments()];
    for (bucket, (param, grad)) in params.into_iter().zip(grads).enumerate() {
        let (param, moments) = rule.update(lr, time, param, grad, per_bucket[bucket].take());
        new_params.push(param);
        for (all, moment) in new_moments.iter_mut().zip(moments) {
            all.push(moment);
        }
    }
    let pieces = layout.pieces(&new_params);
    *state = FlatOptimizerState::Live(FlatState {
        time,
        layout,
        moments: new_moments,
        kept: hints.map(|hints| Kept {
            generation: hints.generation,
            buckets: new_params,
        }),
    });
    module.map(&mut ReplaceParams::<B> {
        pieces: pieces.into_iter(),
        trainable_only: true,
    })
}

/// The gradient buckets multiplied by the hints' factor and clipped to their global norm,
/// without a readback: the coefficient is a one-element device tensor.
fn scaled<B: Backend>(grads: Vec<Tensor<B, 1>>, hints: Option<StepHints>) -> Vec<Tensor<B, 1>> {
    let Some(hints) = hints else {
        return grads;
    };
    match hints.max_norm {
        Some(max_norm) => {
            let squared = squared_norm(&grads).expect("at least one bucket");
            let factor = clip_factor_on_device(squared, hints.factor, max_norm);
            grads
                .into_iter()
                .map(|grad| {
                    let factor = factor.clone().cast(grad.dtype());
                    grad.mul(factor)
                })
                .collect()
        }
        None if hints.factor != 1.0 => grads
            .into_iter()
            .map(|grad| grad.mul_scalar(hints.factor))
            .collect(),
        None => grads,
    }
}

/// The sum of squares of every element of `buckets`, as a one-element device tensor (one
/// reduction per bucket; the padding is zero); `None` without buckets.
fn squared_norm<B: Backend>(buckets: &[Tensor<B, 1>]) -> Option<Tensor<B, 1>> {
    buckets
        .iter()
        .map(|bucket| sum_of_squares(bucket.clone()))
        .reduce(|total, squares| total + squares)
}

/// A module's gradients laid out in a fused optimizer's buckets by the trainer, before the
/// step, so that their norm is one reduction per bucket (see `step_hints`).
pub(crate) struct BucketedGrads<B: Backend> {
    layout: Layout,
    buckets: Vec<Tensor<B, 1>>,
}

impl<B: Backend> BucketedGrads<B> {
    /// Takes `module`'s trainable gradients out of `grads` into buckets laid out as a fused
    /// step lays them out; `None` when nothing trains.
    pub(crate) fn take<AB, M>(module: &M, grads: &mut GradientsParams) -> Option<Self>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let gathered = gather::<AB, M>(module, grads, false);
        let device = gathered.device?;
        let layout = Layout::new(gathered.ids, gathered.sizes);
        let buckets = layout.pad(gathered.grads, &device);
        Some(Self { layout, buckets })
    }

    /// The sum of squares of every gradient, on the device.
    pub(crate) fn squared_norm(&self) -> Tensor<B, 1> {
        squared_norm(&self.buckets).expect("a layout has at least one bucket")
    }
}

/// `[moment][bucket]` as `[bucket]` of `Some([moment])`, or all `None`.
fn transpose<B: Backend>(
    moments: Option<Vec<Vec<Tensor<B, 1>>>>,
    buckets: usize,
) -> Vec<Option<Vec<Tensor<B, 1>>>> {
    let Some(moments) = moments else {
        return vec![None; buckets];
    };
    let mut per_bucket: Vec<Vec<Tensor<B, 1>>> = vec![Vec::new(); buckets];
    for moment in moments {
        for (bucket, tensor) in per_bucket.iter_mut().zip(moment) {
            bucket.push(tensor);
        }
    }
    per_bucket.into_iter().map(Some).collect()
}

/// The saved state laid out as `layout` says: the step count and `[moment][bucket]`; `None`,
/// with a warning, when it was saved for other parameters.
fn restore<B: Backend>(
    saved: Saved<B>,
    layout: &Layout,
    moments: usize,
    device: &B::Device,
    name: &str,
) -> Option<(usize, Vec<Vec<Tensor<B, 1>>>)> {
    if saved.sizes != layout.sizes || saved.moments.len() != moments {
        log::warn!(
            "{name}: the saved state is for {} tensors of {} elements in all, the module trains \
             {} of {}: the optimizer's state restarts",
            saved.sizes.len(),
            saved.sizes.iter().sum::<usize>(),
            layout.sizes.len(),
            layout.sizes.iter().sum::<usize>()
        );
        return None;
    }
    let expected: usize = layout.sizes.iter().sum();
    let mut restored = Vec::with_capacity(moments);
    for buckets in saved.moments {
        let total: usize = buckets.iter().map(|bucket| bucket.dims()[0]).sum();
        if total != expected {
            log::warn!(
                "{name}: a saved moment holds {total} elements, the parameters {expected}: the \
                 optimizer's state restarts"
            );
            return None;
        }
        // Saved with any bucket cut: the same elements, laid out again.
        let pieces = split(concat(buckets), &layout.sizes);
        restored.push(layout.pad(pieces.into_iter().map(Some).collect(), device));
    }
    Some((saved.time, restored))
}

/// Every trainable float parameter, flattened, with its gradient (`None` without one: zeros).
/// A module's trainable parameters in visiting order, each flattened.
struct Gathered<B: Backend> {
    /// The first parameter's device; `None` when nothing trains.
    device: Option<B::Device>,
    ids: Vec<ParamId>,
    sizes: Vec<usize>,
    /// The values, when asked for (empty otherwise).
    values: Vec<Tensor<B, 1>>,
    /// The gradients, taken out of the optimizer's `GradientsParams`.
    grads: Vec<Option<Tensor<B, 1>>>,
}

fn gather<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    with_values: bool,
) -> Gathered<B::InnerBackend> {
    let mut visitor = Gather::<B> {
        grads,
        with_values,
        gathered: Gathered {
            device: None,
            ids: Vec::new(),
            sizes: Vec::new(),
            values: Vec::new(),
            grads: Vec::new(),
        },
    };
    module.visit(&mut visitor);
    visitor.gathered
}

struct Gather<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    with_values: bool,
    gathered: Gathered<B::InnerBackend>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Gather<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let elements = value.shape().num_elements();
        let grad = self
            .grads
            .remove::<B::InnerBackend, D>(param.id)
            .map(|grad| grad.reshape([elements]));
        let gathered = &mut self.gathered;
        gathered.device.get_or_insert_with(|| value.device());
        gathered.ids.push(param.id);
        gathered.sizes.push(elements);
        if self.with_values {
            gathered.values.push(value.inner().reshape([elements]));
        }
        gathered.grads.push(grad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FusedSgdConfig;
    use crate::flat_layout::tests::{tensor, values};
    use burn::backend::{Autodiff, Flex};
    use burn::optim::Optimizer;
    use kiln_ml_testkit::{Mlp, MlpConfig};

    type Ad = Autodiff<Flex>;

    /// The gradients of the sum of `model`'s outputs on a fixed input.
    fn grads_of(model: &Mlp<Ad>) -> GradientsParams {
        let inputs = Tensor::<Ad, 2>::ones([2, 3], &Default::default());
        let loss = model.forward(inputs).sum();
        GradientsParams::from_grads(loss.backward(), model)
    }

    /// One step of `optimizer` with the trainer's hints at `generation` offered.
    fn step_with_hints(
        optimizer: &mut impl Optimizer<Mlp<Ad>, Ad>,
        model: Mlp<Ad>,
        generation: u64,
    ) -> Mlp<Ad> {
        let grads = grads_of(&model);
        step_hints::offer::<()>(
            StepHints {
                factor: 1.0,
                max_norm: None,
                generation,
            },
            None,
        );
        let stepped = optimizer.step(0.1, model, grads);
        assert!(
            step_hints::withdraw(),
            "the fused optimizer takes the hints"
        );
        stepped
    }

    #[test]
    fn new_parameters_under_kept_buckets_are_stepped_from_the_module() {
        let device = Default::default();
        let first = MlpConfig::new(3, &[4], 1).with_seed(1).init::<Ad>(&device);
        let other = MlpConfig::new(3, &[5], 1).with_seed(2).init::<Ad>(&device);
        // Buckets kept for `first` at generation 0; then, at the same generation, a module
        // with other parameters: its values must be gathered, not the kept buckets used.
        let mut optimizer = FusedSgdConfig::new().init::<Ad>();
        let _ = step_with_hints(&mut optimizer, first, 0);
        let stepped = step_with_hints(&mut optimizer, other.clone(), 0);
        let fresh = step_with_hints(&mut FusedSgdConfig::new().init::<Ad>(), other, 0);
        assert_eq!(stepped.params(), fresh.params());
    }

    #[test]
    fn saved_moments_come_back_laid_out_whatever_their_bucket_cut() {
        let layout = Layout::new(vec![ParamId::new(), ParamId::new()], vec![2, 3]);
        let saved = |cut: Vec<Vec<f32>>| Saved {
            time: 7,
            sizes: vec![2, 3],
            moments: vec![cut.into_iter().map(tensor).collect()],
        };
        let device = Default::default();
        for cut in [
            vec![vec![1.0, 2.0, 3.0, 4.0, 5.0]],
            vec![vec![1.0, 2.0], vec![3.0, 4.0, 5.0]],
        ] {
            let (time, moments) = restore(saved(cut), &layout, 1, &device, "test").unwrap();
            assert_eq!(time, 7);
            let flat = values(moments[0][0].clone());
            assert_eq!(&flat[..2], &[1.0, 2.0]);
            assert_eq!(&flat[64..67], &[3.0, 4.0, 5.0]);
        }
        // Other parameters, another moment count, or too few elements: a restart.
        let mut other = saved(vec![vec![1.0, 2.0, 3.0, 4.0, 5.0]]);
        other.sizes = vec![5];
        assert!(restore(other, &layout, 1, &device, "test").is_none());
        let one_moment = saved(vec![vec![1.0, 2.0, 3.0, 4.0, 5.0]]);
        assert!(restore(one_moment, &layout, 2, &device, "test").is_none());
        let short = saved(vec![vec![1.0, 2.0, 3.0, 4.0]]);
        assert!(restore(short, &layout, 1, &device, "test").is_none());
    }

    #[test]
    fn gradients_are_scaled_then_clipped_on_the_device() {
        // Gradients (3, 4) (norm 5), unscaled by 0.5 to (1.5, 2) (norm 2.5), clipped to 1.
        let grads = vec![tensor(vec![3.0, 4.0])];
        let hints = StepHints {
            factor: 0.5,
            max_norm: Some(1.0),
            generation: 0,
        };
        let clipped = values(scaled(grads.clone(), Some(hints)).remove(0));
        let coefficient = 1.0 / (2.5 + 1e-6);
        assert!(
            (clipped[0] - 1.5 * coefficient as f32).abs() < 1e-6,
            "{clipped:?}"
        );
        assert!(
            (clipped[1] - 2.0 * coefficient as f32).abs() < 1e-6,
            "{clipped:?}"
        );
        // Below the threshold only the factor applies; no hints change nothing.
        let loose = StepHints {
            max_norm: Some(10.0),
            ..hints
        };
        assert_eq!(
            values(scaled(grads.clone(), Some(loose)).remove(0)),
            [1.5, 2.0]
        );
        assert_eq!(values(scaled(grads, None).remove(0)), [3.0, 4.0]);
    }
}
