//! The lazy-parameter trap.
//!
//! Burn initializes parameters lazily, and cloning a module whose parameters were never read
//! gives the clone its own initializer: the clone draws other random weights under the same
//! `ParamId`, and no gradient of the clone reaches the original. [`materialize`] reads every
//! parameter once so clones share the original's tensors (and, for autodiff, its graph leaves).

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

/// Forces every lazily initialized parameter of `module` to take its value now.
///
/// Call it before cloning a freshly built module whose clone must share its weights (the
/// trainer does this for its master model).
///
/// ```
/// use burn::backend::Flex;
/// use burn::module::Module;
/// use burn::nn::LinearConfig;
///
/// let layer = LinearConfig::new(3, 2).init::<Flex>(&Default::default());
/// kiln_ml_train::materialize(&layer);
/// let copy = layer.clone();
/// assert!(copy.weight.val().equal(layer.weight.val()).all().into_scalar());
/// ```
pub fn materialize<B: Backend, M: Module<B>>(module: &M) {
    module.visit(&mut Materializer);
}

struct Materializer;

impl<B: Backend> ModuleVisitor<B> for Materializer {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        let _ = param.val();
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        let _ = param.val();
    }
}
