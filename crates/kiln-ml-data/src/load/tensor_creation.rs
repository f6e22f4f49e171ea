//! Which thread creates a batch's device tensors.

use burn::tensor::backend::Backend;

/// Which thread runs a Burn batcher, and so creates the batch's device tensors:
/// [`BurnCollate`](crate::BurnCollate) and [`BurnColumnar`](crate::BurnColumnar) take one.
///
/// Burn 0.21's fusion (on with its `cuda` and `wgpu` backends) queues operations per thread.
/// A tensor created on a loader worker and dropped by the training thread while the training
/// thread's reads of it are still queued is freed too early: the worker's next upload reuses
/// its memory and the queued step reads another batch's values. kiln measured it on lavapipe
/// (docs/performance.md, "f16-mixed through wgpu: batches from other threads"): a third of the
/// batches read wrong when the step starts with an f16 cast, a few in a hundred under f32, and
/// f16-mixed training lost accuracy and determinism. Creating the tensors on the consuming
/// thread avoids it; the samples are still read, decoded and gathered on the workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TensorCreation {
    /// On the consuming thread with a fusion backend, on the workers otherwise (flex,
    /// ndarray, unfused CubeCL backends). The default.
    #[default]
    Auto,
    /// Always on the loader's workers, in parallel with training: safe only on backends
    /// without fusion.
    OnWorkers,
    /// Always on the thread that takes the batch from the epoch.
    OnConsumer,
}

impl TensorCreation {
    /// Whether batches for `device` are created on the consuming thread.
    pub fn on_consumer<B: Backend>(self, device: &B::Device) -> bool {
        match self {
            Self::OnWorkers => false,
            Self::OnConsumer => true,
            // Burn's fusion backend names itself `fusion<INNER>`, under `autodiff<...>` too.
            Self::Auto => B::name(device).contains("fusion<"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn auto_keeps_flex_batches_on_the_workers() {
        assert!(!TensorCreation::Auto.on_consumer::<Flex>(&Default::default()));
        assert!(!TensorCreation::Auto.on_consumer::<Autodiff<Flex>>(&Default::default()));
        assert!(TensorCreation::OnConsumer.on_consumer::<Flex>(&Default::default()));
    }
}
