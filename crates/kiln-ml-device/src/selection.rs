//! The device chosen, and running backend-generic work on it.

use std::fmt;

use burn::backend::Autodiff;
use burn::tensor::backend::AutodiffBackend;

use crate::select_error::SelectError;
#[cfg(feature = "wgpu")]
use crate::vulkan::AdapterKind;

/// The CPU backend: Burn's pure-Rust `flex`, with f16 and bf16 support.
pub type CpuBackend = burn::backend::Flex;

/// The CPU backend with autodiff, for training.
pub type CpuAutodiff = Autodiff<CpuBackend>;

/// The CUDA backend (fusion on; autotuning with the `autotune` feature), for training with
/// autodiff.
#[cfg(feature = "cuda")]
pub type CudaAutodiff = Autodiff<burn::backend::Cuda>;

/// The wgpu backend on Vulkan (SPIR-V compiler, fusion on; autotuning with the `autotune`
/// feature), for training with autodiff.
#[cfg(feature = "wgpu")]
pub type WgpuAutodiff = Autodiff<burn::backend::Wgpu>;

/// The device chosen, with the reason for the choice. The GPU variants exist only in builds
/// with their feature.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selection {
    /// The flex CPU backend.
    Cpu {
        /// Why the CPU was chosen.
        reason: String,
    },
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    Cuda {
        /// The CUDA device index.
        index: usize,
    },
    /// A Vulkan adapter through wgpu.
    #[cfg(feature = "wgpu")]
    Wgpu {
        /// The adapter's name.
        adapter: String,
        /// What kind of device it is.
        kind: AdapterKind,
        /// Why it was chosen.
        reason: String,
    },
}

impl Selection {
    /// A short name: `cpu`, `cuda:N` or `wgpu: ADAPTER`.
    pub fn name(&self) -> String {
        match self {
            Selection::Cpu { .. } => "cpu".to_owned(),
            #[cfg(feature = "cuda")]
            Selection::Cuda { index } => format!("cuda:{index}"),
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { adapter, .. } => format!("wgpu: {adapter}"),
        }
    }

    /// Runs a backend-generic task on the selected device.
    pub fn run<T: BackendTask>(&self, task: T) -> T::Output {
        match self {
            Selection::Cpu { .. } => task.run::<CpuAutodiff>(Default::default()),
            #[cfg(feature = "cuda")]
            Selection::Cuda { index } => {
                task.run::<CudaAutodiff>(burn::backend::cuda::CudaDevice::new(*index))
            }
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { kind, .. } => {
                task.run::<WgpuAutodiff>(crate::vulkan::wgpu_device(*kind))
            }
        }
    }

    /// Runs a backend-generic task on `count` devices of the selected kind, for data-parallel
    /// training: the CPU `count` times (each replica a thread on flex); CUDA devices
    /// `index..index + count`, an error when the driver reports fewer; the selected Vulkan
    /// adapter `count` times (wgpu opens one device per adapter: the replicas share it).
    pub fn run_on_devices<T: DevicesTask>(
        &self,
        count: usize,
        task: T,
    ) -> Result<T::Output, SelectError> {
        match self {
            Selection::Cpu { .. } => Ok(task.run::<CpuAutodiff>(vec![Default::default(); count])),
            #[cfg(feature = "cuda")]
            Selection::Cuda { index } => {
                let available = match crate::cuda::cuda_status() {
                    crate::cuda::CudaStatus::Available { devices, .. } => devices,
                    crate::cuda::CudaStatus::Unavailable { .. } => 0,
                };
                if index + count > available {
                    return Err(SelectError::CudaUnavailable {
                        reason: format!(
                            "{count} devices from cuda:{index} asked for, the driver reports {available}"
                        ),
                    });
                }
                let devices = (*index..index + count)
                    .map(burn::backend::cuda::CudaDevice::new)
                    .collect();
                Ok(task.run::<CudaAutodiff>(devices))
            }
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { kind, .. } => {
                Ok(task.run::<WgpuAutodiff>(vec![crate::vulkan::wgpu_device(*kind); count]))
            }
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selection::Cpu { reason } => write!(f, "cpu (flex): {reason}"),
            #[cfg(feature = "cuda")]
            Selection::Cuda { index } => write!(f, "cuda:{index}"),
            #[cfg(feature = "wgpu")]
            Selection::Wgpu {
                adapter, reason, ..
            } => write!(f, "wgpu (Vulkan) on {adapter}: {reason}"),
        }
    }
}

/// Work that is generic over the autodiff backend, run by [`Selection::run`].
pub trait BackendTask {
    /// What the task returns.
    type Output;
    /// Runs the task on backend `B` and its device.
    fn run<B: AutodiffBackend>(self, device: B::Device) -> Self::Output;
}

/// Work over several devices of one backend (data-parallel replicas), run by
/// [`Selection::run_on_devices`].
pub trait DevicesTask {
    /// What the task returns.
    type Output;
    /// Runs the task on backend `B` and its devices.
    fn run<B: AutodiffBackend>(self, devices: Vec<B::Device>) -> Self::Output;
}

/// The Burn backends this build can select, by name: `flex` always, then `wgpu` and `cuda`
/// when their features are on (what kiln-ml-profile's doctor is told).
pub fn compiled_backends() -> Vec<&'static str> {
    let mut backends = vec!["flex"];
    if cfg!(feature = "wgpu") {
        backends.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        backends.push("cuda");
    }
    backends
}
