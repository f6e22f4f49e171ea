//! Why a requested device cannot be used.

use crate::gpu_tuning::GpuTuningError;

/// Why a requested device cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// CUDA was asked for, but no driver or device answered (or kiln lacks the `cuda` feature).
    #[error("CUDA was requested but cannot be used: {reason}")]
    CudaUnavailable {
        /// Why, in words.
        reason: String,
    },
    /// wgpu was asked for, but no Vulkan adapter answered (or kiln lacks the `wgpu` feature).
    #[error("wgpu (Vulkan) was requested but cannot be used: {reason}")]
    WgpuUnavailable {
        /// Why, in words.
        reason: String,
    },
    /// A GPU was chosen, but kiln's GPU settings from the environment are wrong.
    #[error("the GPU settings: {0}")]
    GpuTuning(GpuTuningError),
}
