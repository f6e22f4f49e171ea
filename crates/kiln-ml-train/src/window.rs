//! One accumulation window: the gradients and losses of the micro-batches of one optimizer
//! step.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;

/// Sums the raw gradients and losses of a window's micro-batches; normalization happens once,
/// at the optimizer step, when the window's real size is known.
pub(crate) struct Window<B: AutodiffBackend> {
    pub(crate) grads: Option<GradientsParams>,
    pub(crate) loss_sum: Option<Tensor<B::InnerBackend, 1>>,
    pub(crate) micro_batches: u32,
    pub(crate) items: u64,
}

impl<B: AutodiffBackend> Default for Window<B> {
    fn default() -> Self {
        Self {
            grads: None,
            loss_sum: None,
            micro_batches: 0,
            items: 0,
        }
    }
}

impl<B: AutodiffBackend> Window<B> {
    /// Adds one micro-batch's gradients and (unscaled, f32, detached) loss.
    pub(crate) fn add<M: AutodiffModule<B>>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        loss: Tensor<B::InnerBackend, 1>,
        items: u64,
    ) {
        self.grads = Some(match self.grads.take() {
            None => grads,
            Some(mut sum) => {
                module.visit(&mut AddGrads::<B> {
                    sum: &mut sum,
                    new: grads,
                    backend: std::marker::PhantomData,
                });
                sum
            }
        });
        self.loss_sum = Some(match self.loss_sum.take() {
            None => loss,
            Some(sum) => sum + loss,
        });
        self.micro_batches += 1;
        self.items += items;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.micro_batches == 0
    }
}

struct AddGrads<'a, B> {
    sum: &'a mut GradientsParams,
    new: GradientsParams,
    backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for AddGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(new) = self.new.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let total = match self.sum.remove::<B::InnerBackend, D>(param.id) {
            Some(sum) => sum + new,
            None => new,
        };
        self.sum.register::<B::InnerBackend, D>(param.id, total);
    }
}
