//! The memory probe of the device kiln-ml-device selected.

use std::sync::Arc;

use kiln_ml_device::Selection;

use crate::MemoryProbe;

/// A probe of the selected device's memory pool (Burn's CubeCL pool on wgpu and CUDA) for the
/// monitor and the batch-size finder; `None` on the CPU, where a
/// [`HeapProbe`](super::HeapProbe) over a [`PeakAlloc`](super::PeakAlloc) global allocator
/// measures instead.
///
/// CubeCL keeps one pool per stream, and a stream per thread: call this on the thread that will
/// train (the one that calls [`Selection::run`]).
pub fn device_memory_probe(selection: &Selection) -> Option<Arc<dyn MemoryProbe>> {
    match selection {
        #[cfg(feature = "cuda")]
        Selection::Cuda { index } => Some(Arc::new(super::CubePoolProbe::cuda(
            &burn::backend::cuda::CudaDevice::new(*index),
        ))),
        #[cfg(feature = "wgpu")]
        Selection::Wgpu { kind, .. } => Some(Arc::new(super::CubePoolProbe::wgpu(
            &kiln_ml_device::wgpu_device(*kind),
        ))),
        _ => None,
    }
}
