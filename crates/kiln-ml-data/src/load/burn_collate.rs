//! The adapter that lets any Burn `Batcher` collate the loader's batches.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;

use super::collate::Collate;
use super::staged::Staged;
use super::tensor_creation::TensorCreation;

/// Collates with a Burn [`Batcher`] on a device: `batcher.batch(items, &device)`, on the
/// loader's worker threads (as Burn's own multi-threaded data loader does) or, with a fusion
/// backend, on the thread that takes the batch, where Burn 0.21 needs its tensors made
/// ([`TensorCreation`]).
///
/// ```
/// use burn::backend::Flex;
/// use burn::data::dataloader::batcher::Batcher;
/// use burn::tensor::{Tensor, TensorData, backend::Backend};
/// use kiln_ml_data::{BurnCollate, Collate};
///
/// #[derive(Clone)]
/// struct Stack;
///
/// impl<B: Backend> Batcher<B, Vec<f32>, Tensor<B, 2>> for Stack {
///     fn batch(&self, items: Vec<Vec<f32>>, device: &B::Device) -> Tensor<B, 2> {
///         let width = items[0].len();
///         let rows = items.len();
///         let values: Vec<f32> = items.into_iter().flatten().collect();
///         Tensor::from_data(TensorData::new(values, [rows, width]), device)
///     }
/// }
///
/// let collate = BurnCollate::<Flex, _, Tensor<Flex, 2>>::new(Stack, Default::default());
/// let batch = collate.collate(vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
/// assert_eq!(batch.dims(), [2, 2]);
/// ```
pub struct BurnCollate<B: Backend, T, O> {
    batcher: Arc<T>,
    device: B::Device,
    creation: TensorCreation,
    /// `creation` resolved for the device once, not per batch (`B::name` formats a string).
    on_consumer: bool,
    output: PhantomData<fn() -> O>,
}

impl<B: Backend, T, O> BurnCollate<B, T, O> {
    /// Collates with `batcher`, creating batches on `device` ([`TensorCreation::Auto`]).
    pub fn new(batcher: T, device: B::Device) -> Self {
        Self {
            on_consumer: TensorCreation::Auto.on_consumer::<B>(&device),
            batcher: Arc::new(batcher),
            device,
            creation: TensorCreation::Auto,
            output: PhantomData,
        }
    }

    /// Runs the batcher on the thread `creation` says.
    pub fn with_tensor_creation(mut self, creation: TensorCreation) -> Self {
        self.creation = creation;
        self.on_consumer = creation.on_consumer::<B>(&self.device);
        self
    }

    /// The device batches are created on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Which thread runs the batcher.
    pub fn tensor_creation(&self) -> TensorCreation {
        self.creation
    }
}

impl<B: Backend, T, O> Clone for BurnCollate<B, T, O> {
    fn clone(&self) -> Self {
        Self {
            batcher: Arc::clone(&self.batcher),
            device: self.device.clone(),
            creation: self.creation,
            on_consumer: self.on_consumer,
            output: PhantomData,
        }
    }
}

impl<B: Backend, T, O> fmt::Debug for BurnCollate<B, T, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BurnCollate")
            .field("device", &self.device)
            .field("creation", &self.creation)
            .finish_non_exhaustive()
    }
}

impl<B, T, I, O> Collate<I> for BurnCollate<B, T, O>
where
    B: Backend,
    T: Batcher<B, I, O> + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    type Output = O;
    fn collate(&self, items: Vec<I>) -> O {
        self.batcher.batch(items, &self.device)
    }

    fn stage(&self, items: Vec<I>) -> Staged<O> {
        if !self.on_consumer {
            return Staged::ready(self.collate(items));
        }
        let batcher = Arc::clone(&self.batcher);
        let device = self.device.clone();
        Staged::on_consumer(move || batcher.batch(items, &device))
    }
}
