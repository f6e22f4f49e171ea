//! Where device memory figures come from: the `MemoryProbe` seam shared by the device monitor
//! and the batch-size finder.

use serde::{Deserialize, Serialize};

/// Memory use as one source reports it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryReading {
    /// Bytes held by live allocations (tensors).
    pub in_use_bytes: u64,
    /// Bytes reserved from the device (or the OS): what another process cannot have.
    pub reserved_bytes: u64,
    /// The device's total memory, when the source knows it.
    pub total_bytes: Option<u64>,
    /// The highest `reserved_bytes` (or, for a heap, `in_use_bytes`) since the last
    /// [`MemoryProbe::reset_peak`], when the source tracks it.
    pub peak_bytes: Option<u64>,
}

/// A source of memory readings: Burn's CubeCL memory pool (wgpu, CUDA), NVML, or the process
/// heap for CPU backends. Shared between the monitor thread and the training thread.
pub trait MemoryProbe: Send + Sync {
    /// A short name for reports: `wgpu pool`, `cuda pool`, `nvml`, `heap`.
    fn name(&self) -> &str;

    /// The current reading, or why none can be had.
    fn read(&self) -> Result<MemoryReading, String>;

    /// Starts a new peak window (a batch-size trial). Sources without a peak ignore it.
    fn reset_peak(&self) {}

    /// Asks the allocator to give back what it can (between batch-size trials). Nothing is
    /// guaranteed; sources without a pool ignore it.
    fn cleanup(&self) {}
}

impl std::fmt::Debug for dyn MemoryProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryProbe({})", self.name())
    }
}

impl<T: MemoryProbe + ?Sized> MemoryProbe for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn read(&self) -> Result<MemoryReading, String> {
        (**self).read()
    }
    fn reset_peak(&self) {
        (**self).reset_peak()
    }
    fn cleanup(&self) {
        (**self).cleanup()
    }
}

impl<T: MemoryProbe + ?Sized> MemoryProbe for Box<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn read(&self) -> Result<MemoryReading, String> {
        (**self).read()
    }
    fn reset_peak(&self) {
        (**self).reset_peak()
    }
    fn cleanup(&self) {
        (**self).cleanup()
    }
}
