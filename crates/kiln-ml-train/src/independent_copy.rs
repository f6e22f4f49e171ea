//! The shared-running-statistics trap.
//!
//! A Burn clone shares its modules' running statistics (`RunningState`, as in `BatchNorm`)
//! with the original: they sit behind one `Arc<Mutex<_>>`, and `Module::map`, `load_record`
//! and `to_device` write through it in place. Whatever trains, averages or loads into a
//! clone therefore also changes the original's statistics. [`independent_copy`] makes a copy
//! that shares nothing it could write.

use std::any::Any;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Bool, Int, Tensor};

/// A copy of `model` with its own running statistics: training it, averaging into it or
/// loading a record into it leaves `model` as it is. Its parameters are `model`'s, as a clone
/// has them: the same ids, values, `require_grad` and load/save hooks (a column-major
/// `Linear` transposes its weight through them). Lazily initialized parameters are
/// initialized in both.
///
/// The trainer uses it where a copy must not write back: the range test's model
/// ([`LrFinder::run`](crate::LrFinder::run)), the moving average of the weights and a
/// checkpoint being loaded (which must leave the live model untouched when it is refused).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::BatchNormConfig;
/// use burn::tensor::Tensor;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let norm = BatchNormConfig::new(2).init::<B>(&device);
/// let copy = kiln_ml_train::independent_copy(&norm);
/// // Training the copy moves its running mean, not the original's (a clone's would move both).
/// copy.forward(Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device));
/// let mean = |norm: &burn::nn::BatchNorm<B>| -> Vec<f32> {
///     norm.running_mean.value_sync().into_data().to_vec().unwrap()
/// };
/// assert_ne!(mean(&copy), [0.0, 0.0]);
/// assert_eq!(mean(&norm), [0.0, 0.0]);
/// ```
pub fn independent_copy<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> M {
    // `valid` and `from_inner` each build new running states from the current values, but
    // also new parameters without their hooks: the original's are put back in their places.
    let copy = M::from_inner(model.valid());
    let mut originals = Originals(Vec::new());
    model.visit(&mut originals);
    copy.map(&mut Restore(originals.0.into_iter()))
}

/// Every parameter of a module in visiting order, as clones. A running state is visited as a
/// parameter made of its value; restoring it writes that value into the copy's own state.
struct Originals(Vec<Box<dyn Any>>);

impl<B: AutodiffBackend> ModuleVisitor<B> for Originals {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(Box::new(param.clone()));
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.0.push(Box::new(param.clone()));
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.0.push(Box::new(param.clone()));
    }
}

/// Replaces each parameter of the copy with the original of the same place.
struct Restore(std::vec::IntoIter<Box<dyn Any>>);

impl Restore {
    fn next<P: 'static>(&mut self) -> P {
        let original = self
            .0
            .next()
            .expect("a copy has the parameters of its original, in the same order");
        *original
            .downcast::<P>()
            .expect("a copy's parameter has the kind and rank of its original's")
    }
}

impl<B: AutodiffBackend> ModuleMapper<B> for Restore {
    fn map_float<const D: usize>(&mut self, _: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        self.next()
    }
    fn map_int<const D: usize>(&mut self, _: Param<Tensor<B, D, Int>>) -> Param<Tensor<B, D, Int>> {
        self.next()
    }
    fn map_bool<const D: usize>(
        &mut self,
        _: Param<Tensor<B, D, Bool>>,
    ) -> Param<Tensor<B, D, Bool>> {
        self.next()
    }
}
