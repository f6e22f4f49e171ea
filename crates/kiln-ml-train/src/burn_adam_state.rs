//! Burn's `Adam` and `AdamW` state carried over into a [`FusedAdam`]: a run that trained with
//! Burn's optimizer goes on with kiln's without restarting the moments.

use std::marker::PhantomData;

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamW, AdaptiveMomentumState, Optimizer, SimpleOptimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::flat_step::{FlatOptimizerState, Saved};
use crate::{Error, FusedAdam, Result};

/// The record of Burn's optimizer `O` for module `M`: a map from parameter to state.
type BurnRecord<O, M, B> = <OptimizerAdaptor<O, M, B> as Optimizer<M, B>>::Record;

/// The adaptive momentum inside Burn's Adam-family states.
trait AdamFamily<B: Backend>: SimpleOptimizer<B> {
    fn momentum<const D: usize>(state: Self::State<D>) -> AdaptiveMomentumState<B, D>;
}

impl<B: Backend> AdamFamily<B> for Adam {
    fn momentum<const D: usize>(state: Self::State<D>) -> AdaptiveMomentumState<B, D> {
        state.momentum
    }
}

impl<B: Backend> AdamFamily<B> for AdamW {
    fn momentum<const D: usize>(state: Self::State<D>) -> AdaptiveMomentumState<B, D> {
        state.momentum
    }
}

impl<B: AutodiffBackend> FusedAdam<B> {
    /// Takes over the state of Burn's `Adam` (`Optimizer::to_record` of `AdamConfig::init`)
    /// for `module`: its step count and both moments of every trainable parameter. Fails when
    /// a trainable parameter has no state while others do, or the step counts differ (Burn
    /// keeps one per parameter; kiln one for all).
    pub fn with_burn_adam_state<M: AutodiffModule<B>>(
        self,
        module: &M,
        record: BurnRecord<Adam, M, B>,
    ) -> Result<Self> {
        self.with_burn_state::<M, Adam>(module, record)
    }

    /// [`with_burn_adam_state`](Self::with_burn_adam_state) for Burn's `AdamW`.
    pub fn with_burn_adamw_state<M: AutodiffModule<B>>(
        self,
        module: &M,
        record: BurnRecord<AdamW, M, B>,
    ) -> Result<Self> {
        self.with_burn_state::<M, AdamW>(module, record)
    }

    fn with_burn_state<M, O>(mut self, module: &M, record: BurnRecord<O, M, B>) -> Result<Self>
    where
        M: AutodiffModule<B>,
        O: AdamFamily<B::InnerBackend>,
    {
        let mut visitor = TakeMoments::<B, O, M> {
            record,
            module: PhantomData,
            times: Vec::new(),
            sizes: Vec::new(),
            first: Vec::new(),
            second: Vec::new(),
            missing: 0,
            amsgrad: 0,
        };
        module.visit(&mut visitor);
        let TakeMoments {
            times,
            sizes,
            first,
            second,
            missing,
            amsgrad,
            ..
        } = visitor;
        if times.is_empty() {
            // Burn's optimizer has not stepped: nothing to carry over.
            return Ok(self);
        }
        let invalid = |reason: String| Error::InvalidConfig {
            field: "Burn optimizer state",
            value: format!("{} parameters with state, {missing} without", times.len()),
            reason,
        };
        if amsgrad > 0 {
            return Err(invalid(format!(
                "{amsgrad} parameters carry AMSGrad's running maximum of the second moment, \
                 which FusedAdam does not keep: continue with Burn's Adam (amsgrad), or \
                 without AMSGrad"
            )));
        }
        if missing > 0 {
            return Err(invalid(
                "every trainable parameter needs its moments to continue in one flat state".into(),
            ));
        }
        let time = times[0];
        if let Some(other) = times.iter().find(|&&t| t != time) {
            return Err(invalid(format!(
                "the parameters were stepped {time} and {other} times; kiln keeps one count"
            )));
        }
        self.state = FlatOptimizerState::load(Saved {
            time,
            sizes,
            moments: vec![first, second],
        });
        Ok(self)
    }
}

/// Every trainable parameter's moments out of Burn's record, flattened, in visiting order.
struct TakeMoments<B, O, M>
where
    B: AutodiffBackend,
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
{
    record: BurnRecord<O, M, B>,
    module: PhantomData<M>,
    times: Vec<usize>,
    sizes: Vec<usize>,
    first: Vec<Tensor<B::InnerBackend, 1>>,
    second: Vec<Tensor<B::InnerBackend, 1>>,
    missing: usize,
    /// Parameters with AMSGrad's running maximum, which `FusedAdam` does not keep.
    amsgrad: usize,
}

impl<B, O, M> ModuleVisitor<B> for TakeMoments<B, O, M>
where
    B: AutodiffBackend,
    O: AdamFamily<B::InnerBackend>,
    M: AutodiffModule<B>,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let elements = value.shape().num_elements();
        self.sizes.push(elements);
        match self.record.remove(&param.id) {
            Some(state) => {
                let momentum = O::momentum(state.into_state::<D>());
                self.amsgrad += usize::from(momentum.max_moment_2.is_some());
                self.times.push(momentum.time);
                self.first.push(momentum.moment_1.reshape([elements]));
                self.second.push(momentum.moment_2.reshape([elements]));
            }
            None => self.missing += 1,
        }
    }
}
