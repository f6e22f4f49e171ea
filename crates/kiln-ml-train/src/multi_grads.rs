//! Gradients computed on several devices, summed per parameter on the parameter's device, as
//! Burn's optimizers do with `MultiGradientsParams`.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;

/// One gradient per parameter of `module`: the devices' gradients summed on its device.
pub(crate) fn sum_multi_device<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    mut grads: MultiGradientsParams,
) -> GradientsParams {
    let mut collect = CollectMulti::<B> {
        grads: &mut grads,
        out: GradientsParams::new(),
        backend: std::marker::PhantomData,
    };
    module.visit(&mut collect);
    collect.out
}

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
