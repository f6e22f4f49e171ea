//! Collation: turning a batch's samples into what the training step consumes.

use std::fmt;
use std::sync::Arc;

use super::staged::Staged;

/// Turns the samples of one batch, in plan order, into a batch.
///
/// The loader calls [`stage`](Self::stage) on its worker threads, and finishes what it returns
/// on the thread that takes the batch. Use [`collate_fn`] for a closure,
/// [`BurnCollate`](crate::BurnCollate) for any Burn `Batcher`, or [`NoCollate`] to get the
/// samples back as a `Vec`.
pub trait Collate<I>: Send + Sync {
    /// The batch.
    type Output: Send;

    /// Builds a batch from its samples.
    fn collate(&self, items: Vec<I>) -> Self::Output;

    /// Builds a batch on a loader worker, or leaves its last part to the consuming thread (as
    /// the Burn collations do with device tensors on fusion backends: see
    /// [`TensorCreation`](crate::TensorCreation)). By default the whole [`collate`](Self::collate)
    /// runs on the worker.
    fn stage(&self, items: Vec<I>) -> Staged<Self::Output> {
        Staged::ready(self.collate(items))
    }
}

impl<I, T: Collate<I> + ?Sized> Collate<I> for Box<T> {
    type Output = T::Output;
    fn collate(&self, items: Vec<I>) -> Self::Output {
        (**self).collate(items)
    }
    fn stage(&self, items: Vec<I>) -> Staged<Self::Output> {
        (**self).stage(items)
    }
}

impl<I, T: Collate<I> + ?Sized> Collate<I> for Arc<T> {
    type Output = T::Output;
    fn collate(&self, items: Vec<I>) -> Self::Output {
        (**self).collate(items)
    }
    fn stage(&self, items: Vec<I>) -> Staged<Self::Output> {
        (**self).stage(items)
    }
}

/// A [`Collate`] made from a closure; see [`collate_fn`].
#[derive(Clone, Copy)]
pub struct CollateFn<F>(F);

impl<F> fmt::Debug for CollateFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollateFn").finish_non_exhaustive()
    }
}

/// Collation by a closure from the batch's samples to the batch.
///
/// ```
/// use kiln_ml_data::{collate_fn, Collate};
///
/// let sum = collate_fn(|items: Vec<u64>| items.iter().sum::<u64>());
/// assert_eq!(sum.collate(vec![1, 2, 3]), 6);
/// ```
pub fn collate_fn<F>(function: F) -> CollateFn<F> {
    CollateFn(function)
}

impl<I, O, F> Collate<I> for CollateFn<F>
where
    O: Send,
    F: Fn(Vec<I>) -> O + Send + Sync,
{
    type Output = O;
    fn collate(&self, items: Vec<I>) -> O {
        (self.0)(items)
    }
}

/// No collation: a batch is the `Vec` of its samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoCollate;

impl<I: Send> Collate<I> for NoCollate {
    type Output = Vec<I>;
    fn collate(&self, items: Vec<I>) -> Vec<I> {
        items
    }
}
