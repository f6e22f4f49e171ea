//! The shared-running-statistics trap.
//!
//! A Burn clone shares its modules' running statistics (`RunningState`, as in `BatchNorm`)
//! with the original: they sit behind one `Arc<Mutex<_>>`, and `Module::map`, `load_record`
//! and `to_device` write through it in place. Whatever trains, averages or loads into a
//! clone therefore also changes the original's statistics. [`independent_copy`] makes a copy
//! that shares nothing it could write.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

/// A copy of `model` with its own running statistics: training it, averaging into it or
/// loading a record into it leaves `model` as it is. Parameters keep their ids, values and
/// `require_grad`; the copy holds no autodiff graph (its parameters are leaves, as a
/// freshly built model's are).
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
    // `valid` and `from_inner` each build new running states from the current values.
    M::from_inner(model.valid())
}
