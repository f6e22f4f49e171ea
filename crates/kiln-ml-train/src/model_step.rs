//! What a model implements to be trained and validated: Burn's `TrainStep`/`InferenceStep`
//! shapes, with the backward pass left to the trainer.

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor};

use crate::Autocast;

/// A training step's forward result: the loss to differentiate, whatever else the step wants
/// to hand back (predictions for training metrics), and optionally how many items the loss
/// sums over.
#[derive(Debug, Clone)]
pub struct StepOutput<B: Backend, O> {
    /// The loss, one value. Mean-reduced over the micro-batch for
    /// [`LossNormalization::MicroBatches`](crate::LossNormalization::MicroBatches) (the default);
    /// summed over items for [`LossNormalization::Items`](crate::LossNormalization::Items).
    pub loss: Tensor<B, 1>,
    /// What the step returns to the caller of [`Trainer::train_batch`](crate::Trainer::train_batch).
    pub item: O,
    /// Items the loss sums over (non-padded tokens, agents, ...), for item normalization.
    pub items: Option<u64>,
}

impl<B: Backend, O> StepOutput<B, O> {
    /// A step output with a loss and an item.
    pub fn new(loss: Tensor<B, 1>, item: O) -> Self {
        Self {
            loss,
            item,
            items: None,
        }
    }

    /// Records how many items the (summed) loss covers.
    pub fn with_items(mut self, items: u64) -> Self {
        self.items = Some(items);
        self
    }

    /// The loss of a padded batch (samples of varying sizes padded to the longest): the sum of
    /// `per_element` where `mask` is true (the padding filled, not multiplied, so its value never
    /// reaches the loss; pad with finite values all the same, as the backward pass multiplies
    /// through them), and `items`, the real elements (the sum of the batch's lengths, known on the host from
    /// the collation, so nothing is read back). Train it with
    /// [`LossNormalization::Items`](crate::LossNormalization::Items): every real element then
    /// weighs the same, however the batches were sized or padded.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{Bool, Tensor, TensorData};
    /// use kiln_ml_train::StepOutput;
    ///
    /// let device = Default::default();
    /// // Two sequences of lengths 2 and 1, padded to 2; the padding's loss is large.
    /// let losses = Tensor::<Flex, 2>::from_data([[1.0, 2.0], [4.0, 1.0e6]], &device);
    /// let mask = Tensor::<Flex, 2, Bool>::from_data(TensorData::from([[true, true], [true, false]]), &device);
    /// let output = StepOutput::masked_sum(losses, mask, 3, ());
    /// assert_eq!(output.loss.into_scalar(), 7.0);
    /// assert_eq!(output.items, Some(3));
    /// ```
    pub fn masked_sum<const D: usize>(
        per_element: Tensor<B, D>,
        mask: Tensor<B, D, Bool>,
        items: u64,
        item: O,
    ) -> Self {
        // In a fixed order, so the loss read back repeats to the bit (see `fixed_order_sum`).
        let loss = crate::fixed_order_sum(per_element.mask_fill(mask.bool_not(), 0.0));
        Self::new(loss, item).with_items(items)
    }
}

/// The forward half of a training step, implemented by the model: one required method,
/// [`step`](Self::step), as Burn's.
///
/// It mirrors Burn's `burn::train::TrainStep`, except that it returns the loss instead of
/// calling `backward` itself: the trainer owns the backward pass because it scales the loss
/// (f16), accumulates gradients over micro-batches and normalizes them. Porting a Burn step
/// means returning the loss instead of `TrainOutput::new(self, loss.backward(), item)`.
///
/// Under mixed precision `self` is a low-precision copy of the master model: cast float inputs
/// with [`Autocast::input`] and activations back with [`Autocast::full`] before the loss.
///
/// ```
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
/// use burn::tensor::{Tensor, backend::{AutodiffBackend, Backend}};
/// use kiln_ml_train::{Autocast, StepOutput, TrainStep};
///
/// #[derive(Module, Debug)]
/// struct Regressor<B: Backend> {
///     linear: Linear<B>,
/// }
///
/// struct Batch<B: Backend> {
///     inputs: Tensor<B, 2>,
///     targets: Tensor<B, 2>,
/// }
///
/// impl<B: AutodiffBackend> TrainStep<B> for Regressor<B> {
///     type Input = Batch<B>;
///     type Output = ();
///
///     fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
///         let predictions = autocast.full(self.linear.forward(autocast.input(batch.inputs)));
///         let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
///         StepOutput::new(loss, ())
///     }
/// }
/// ```
pub trait TrainStep<B: AutodiffBackend> {
    /// One micro-batch.
    type Input;
    /// What the step hands back besides the loss.
    type Output;

    /// Runs the forward pass and the loss on one micro-batch.
    fn step(&self, batch: Self::Input, autocast: &Autocast) -> StepOutput<B, Self::Output>;

    /// Moves a batch to `device`; timed as the host-to-device phase. The default keeps the
    /// batch as it is (Burn batchers usually build tensors on the device already).
    fn to_device(&self, batch: Self::Input, _device: &B::Device) -> Self::Input {
        batch
    }
}

/// A validation step, implemented by the model's inner (non-autodiff) module.
///
/// The same shape as Burn's `burn::train::InferenceStep`, plus the [`Autocast`] policy
/// (validation runs at the training precision).
pub trait InferenceStep<B: Backend> {
    /// One validation batch.
    type Input;
    /// What the metrics consume.
    type Output;

    /// Runs the forward pass on one batch.
    fn step(&self, batch: Self::Input, autocast: &Autocast) -> Self::Output;
}
