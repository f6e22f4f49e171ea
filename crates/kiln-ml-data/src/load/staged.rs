//! A collated batch as a worker hands it over: finished, or with its last part left to the
//! thread that consumes it.

use std::fmt;

/// A batch from a loader worker: either finished there, or with its last part (creating
/// device tensors) left to the consuming thread, which runs it when the batch is taken.
///
/// [`Collate::stage`](crate::Collate::stage) makes one; the loader's
/// [`Epoch`](crate::Epoch) finishes it. Device tensors are made on the consuming thread when a
/// backend cannot hand a tensor from one thread to another safely: see
/// [`TensorCreation`](crate::TensorCreation).
///
/// ```
/// use kiln_ml_data::Staged;
///
/// assert_eq!(Staged::ready(3).finish(), 3);
/// let later = Staged::on_consumer(move || 2 + 2);
/// assert!(!later.is_ready());
/// assert_eq!(later.finish(), 4);
/// ```
pub struct Staged<O>(Stage<O>);

enum Stage<O> {
    Ready(O),
    OnConsumer(Box<dyn FnOnce() -> O + Send>),
}

impl<O> Staged<O> {
    /// A batch finished on the worker.
    pub fn ready(batch: O) -> Self {
        Self(Stage::Ready(batch))
    }

    /// A batch whose last part, `finish`, runs on the consuming thread.
    pub fn on_consumer(finish: impl FnOnce() -> O + Send + 'static) -> Self {
        Self(Stage::OnConsumer(Box::new(finish)))
    }

    /// Whether the batch was finished on the worker.
    pub fn is_ready(&self) -> bool {
        matches!(self.0, Stage::Ready(_))
    }

    /// The batch, finishing it here if its last part was left to this thread.
    pub fn finish(self) -> O {
        match self.0 {
            Stage::Ready(batch) => batch,
            Stage::OnConsumer(finish) => finish(),
        }
    }
}

impl<O> fmt::Debug for Staged<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = if self.is_ready() {
            "ready"
        } else {
            "on consumer"
        };
        f.debug_tuple("Staged").field(&stage).finish()
    }
}
