//! Choosing a Burn backend at run time: CUDA after a driver is found, else a Vulkan GPU through
//! wgpu, else flex on the CPU.
//!
//! Burn 0.21's CUDA backend loads `libcuda` lazily, and its wgpu backend asks for an adapter
//! lazily; without one, the first operation panics on a device thread. So kiln never picks a
//! device blindly: [`cuda_status`] loads the driver library and asks it for devices, and
//! [`vulkan_status`] enumerates Vulkan adapters, before [`select`] chooses, with the reason for
//! each step spelled out. [`DevicePreference::Auto`] takes CUDA, then a hardware Vulkan
//! adapter, then the pure-Rust `flex` CPU backend (which supports f16 and bf16); it never takes
//! a software Vulkan driver such as Mesa's lavapipe, which is slower than flex on the same
//! CPU. Ask for that one with [`DevicePreference::Wgpu`]: it exercises Burn's GPU code paths
//! (fusion, autotune, the device memory pool, asynchronous readback) without a GPU.
//!
//! Generic code runs on whichever backend was chosen through [`BackendTask`]:
//!
//! ```
//! use burn::tensor::{Tensor, backend::AutodiffBackend};
//! use kiln::backend::{BackendTask, DevicePreference, select};
//!
//! struct SumOfOnes;
//!
//! impl BackendTask for SumOfOnes {
//!     type Output = f32;
//!     fn run<B: AutodiffBackend>(self, device: B::Device) -> f32 {
//!         Tensor::<B, 1>::ones([4], &device).sum().into_scalar().to_string().parse().unwrap()
//!     }
//! }
//!
//! let selection = select(DevicePreference::Cpu).unwrap();
//! assert_eq!(selection.run(SumOfOnes), 4.0);
//! ```

use std::fmt;
use std::str::FromStr;

use burn::backend::Autodiff;

pub use crate::gpu_tuning::{GpuTuning, GpuTuningError};
use burn::tensor::backend::AutodiffBackend;

/// The CPU backend: Burn's pure-Rust `flex`, with f16 and bf16 support.
pub type CpuBackend = burn::backend::Flex;

/// The CPU backend with autodiff, for training.
pub type CpuAutodiff = Autodiff<CpuBackend>;

/// The CUDA backend (fusion and autotune on), for training with autodiff.
#[cfg(feature = "cuda")]
pub type CudaAutodiff = Autodiff<burn::backend::Cuda>;

/// The wgpu backend on Vulkan (SPIR-V compiler, fusion and autotune on), for training with
/// autodiff.
#[cfg(feature = "wgpu")]
pub type WgpuAutodiff = Autodiff<burn::backend::Wgpu>;

/// Which device the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePreference {
    /// CUDA device 0 when a driver and a device are found, else a hardware Vulkan adapter,
    /// else the CPU.
    #[default]
    Auto,
    /// The CPU, always.
    Cpu,
    /// A CUDA device; an error when none can be used.
    Cuda,
    /// A Vulkan adapter through wgpu, a software one (lavapipe) included; an error when none
    /// can be used.
    Wgpu,
}

impl FromStr for DevicePreference {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" | "flex" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda),
            "wgpu" | "vulkan" => Ok(Self::Wgpu),
            other => Err(format!(
                "unknown device {other:?}: use auto, cpu, cuda or wgpu"
            )),
        }
    }
}

/// Whether CUDA can be used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaStatus {
    /// The driver loaded and reported devices.
    Available {
        /// Number of CUDA devices.
        devices: usize,
        /// The first device's name, as the driver reports it (`NVIDIA H200`).
        name: String,
    },
    /// CUDA cannot be used.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

/// Whether a Vulkan adapter can be used through wgpu, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VulkanStatus {
    /// The best adapter found (hardware before software).
    Available {
        /// The adapter's name, as the driver reports it.
        adapter: String,
        /// What kind of device it is.
        kind: AdapterKind,
    },
    /// No adapter can be used.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

/// The kind of a Vulkan adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdapterKind {
    /// A discrete GPU.
    Discrete,
    /// A GPU integrated with the CPU.
    Integrated,
    /// A virtualized GPU.
    Virtual,
    /// A driver that runs on the CPU (Mesa's lavapipe/llvmpipe, SwiftShader).
    Software,
}

/// The device chosen, with the reason for the choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// The flex CPU backend.
    Cpu {
        /// Why the CPU was chosen.
        reason: String,
    },
    /// A CUDA device (only ever returned when kiln is built with the `cuda` feature).
    Cuda {
        /// The CUDA device index.
        index: usize,
    },
    /// A Vulkan adapter through wgpu (only ever returned when kiln is built with the `wgpu`
    /// feature).
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
            Selection::Cuda { index } => format!("cuda:{index}"),
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
            #[cfg(not(feature = "cuda"))]
            Selection::Cuda { .. } => {
                unreachable!("select() never returns CUDA without the `cuda` feature")
            }
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { kind, .. } => task.run::<WgpuAutodiff>(vulkan::device(*kind)),
            #[cfg(not(feature = "wgpu"))]
            Selection::Wgpu { .. } => {
                unreachable!("select() never returns wgpu without the `wgpu` feature")
            }
        }
    }
}

impl Selection {
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
                let available = match cuda_status() {
                    CudaStatus::Available { devices, .. } => devices,
                    CudaStatus::Unavailable { .. } => 0,
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
            #[cfg(not(feature = "cuda"))]
            Selection::Cuda { .. } => {
                unreachable!("select() never returns CUDA without the `cuda` feature")
            }
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { kind, .. } => {
                Ok(task.run::<WgpuAutodiff>(vec![vulkan::device(*kind); count]))
            }
            #[cfg(not(feature = "wgpu"))]
            Selection::Wgpu { .. } => {
                unreachable!("select() never returns wgpu without the `wgpu` feature")
            }
        }
    }
}

#[cfg(feature = "profile")]
impl Selection {
    /// A probe of the selected device's memory pool (Burn's CubeCL pool on wgpu and CUDA) for
    /// kiln-profile's monitor and batch-size finder; `None` on the CPU, where
    /// `kiln::profile::monitor::HeapProbe` over a `PeakAlloc` global allocator measures instead.
    ///
    /// CubeCL keeps one pool per stream, and a stream per thread: call this on the thread that
    /// will train (the one that calls [`run`](Self::run)).
    pub fn memory_probe(&self) -> Option<std::sync::Arc<dyn kiln_profile::MemoryProbe>> {
        match self {
            Selection::Cpu { .. } => None,
            #[cfg(feature = "cuda")]
            Selection::Cuda { index } => Some(std::sync::Arc::new(
                kiln_profile::monitor::CubePoolProbe::cuda(&burn::backend::cuda::CudaDevice::new(
                    *index,
                )),
            )),
            #[cfg(not(feature = "cuda"))]
            Selection::Cuda { .. } => None,
            #[cfg(feature = "wgpu")]
            Selection::Wgpu { kind, .. } => Some(std::sync::Arc::new(
                kiln_profile::monitor::CubePoolProbe::wgpu(&vulkan::device(*kind)),
            )),
            #[cfg(not(feature = "wgpu"))]
            Selection::Wgpu { .. } => None,
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selection::Cpu { reason } => write!(f, "cpu (flex): {reason}"),
            Selection::Cuda { index } => write!(f, "cuda:{index}"),
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

/// Picks the device for a preference. [`DevicePreference::Cuda`] and
/// [`DevicePreference::Wgpu`] fail when that device cannot be used; `Auto` and `Cpu` never
/// fail, and the selection says why each faster choice was passed over.
///
/// When it picks a GPU, it makes [`GpuTuning::from_env`] CubeCL's settings (cache directory,
/// autotune level, kernel log) unless settings were applied before.
pub fn select(preference: DevicePreference) -> Result<Selection, SelectError> {
    let (selection, gpu_model) = choose(preference)?;
    if let Some(model) = gpu_model {
        let applied = GpuTuning::from_env()
            .map_err(SelectError::GpuTuning)?
            .for_device(&model)
            .apply();
        match applied {
            // Applied now, or by the user before: either way the GPU runs with kiln's choice.
            Ok(_) | Err(GpuTuningError::AlreadyConfigured { .. }) => {}
            Err(error) => return Err(SelectError::GpuTuning(error)),
        }
    }
    Ok(selection)
}

/// The choice of [`select`], before any setting is applied, with the chosen GPU's model (what
/// its compiled kernels are kept under), from the probe that found it.
fn choose(preference: DevicePreference) -> Result<(Selection, Option<String>), SelectError> {
    let on_cuda = |name: String| (Selection::Cuda { index: 0 }, Some(format!("cuda {name}")));
    let on_wgpu = |adapter: String, kind, reason: String| {
        let model = Some(format!("vulkan {adapter}"));
        let selection = Selection::Wgpu {
            adapter,
            kind,
            reason,
        };
        (selection, model)
    };
    match preference {
        // Answered without probing: the CPU needs no driver, and `cuInit` can take seconds.
        DevicePreference::Cpu => Ok((
            Selection::Cpu {
                reason: "requested".to_owned(),
            },
            None,
        )),
        DevicePreference::Cuda => match cuda_status() {
            CudaStatus::Available { name, .. } => Ok(on_cuda(name)),
            CudaStatus::Unavailable { reason } => Err(SelectError::CudaUnavailable { reason }),
        },
        DevicePreference::Wgpu => match vulkan_status() {
            VulkanStatus::Available { adapter, kind } => {
                Ok(on_wgpu(adapter, kind, "requested".to_owned()))
            }
            VulkanStatus::Unavailable { reason } => Err(SelectError::WgpuUnavailable { reason }),
        },
        DevicePreference::Auto => {
            let no_cuda = match cuda_status() {
                CudaStatus::Available { name, .. } => return Ok(on_cuda(name)),
                CudaStatus::Unavailable { reason } => reason,
            };
            let vulkan = match vulkan_status() {
                VulkanStatus::Available { adapter, kind } if kind != AdapterKind::Software => {
                    return Ok(on_wgpu(adapter, kind, format!("no CUDA: {no_cuda}")));
                }
                VulkanStatus::Available { adapter, .. } => format!(
                    "only a software Vulkan adapter ({adapter}), slower than flex on the same \
                     CPU; ask for it with the `wgpu` device"
                ),
                VulkanStatus::Unavailable { reason } => reason,
            };
            let reason = format!("no CUDA: {no_cuda}; no Vulkan GPU: {vulkan}");
            Ok((Selection::Cpu { reason }, None))
        }
    }
}

/// Looks for a Vulkan adapter (hardware before software) without starting Burn's wgpu runtime.
pub fn vulkan_status() -> VulkanStatus {
    #[cfg(feature = "wgpu")]
    {
        vulkan::probe()
    }
    #[cfg(not(feature = "wgpu"))]
    {
        VulkanStatus::Unavailable {
            reason: "kiln was built without the `wgpu` feature".to_owned(),
        }
    }
}

/// Checks for a usable CUDA driver and devices without touching Burn's CUDA runtime.
pub fn cuda_status() -> CudaStatus {
    #[cfg(feature = "cuda")]
    {
        driver::probe()
    }
    #[cfg(not(feature = "cuda"))]
    {
        CudaStatus::Unavailable {
            reason: "kiln was built without the `cuda` feature".to_owned(),
        }
    }
}

#[cfg(feature = "wgpu")]
mod vulkan {
    //! Vulkan adapters as wgpu enumerates them, without creating a device.

    use burn::backend::wgpu::WgpuDevice;

    use super::{AdapterKind, VulkanStatus};

    pub(super) fn probe() -> VulkanStatus {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapters =
            futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let best = adapters
            .iter()
            .map(|adapter| adapter.get_info())
            .filter_map(|info| {
                let kind = match info.device_type {
                    wgpu::DeviceType::DiscreteGpu => AdapterKind::Discrete,
                    wgpu::DeviceType::IntegratedGpu => AdapterKind::Integrated,
                    wgpu::DeviceType::VirtualGpu => AdapterKind::Virtual,
                    wgpu::DeviceType::Cpu => AdapterKind::Software,
                    wgpu::DeviceType::Other => return None,
                };
                Some((kind, info.name))
            })
            .min_by_key(|(kind, _)| *kind as u8);
        match best {
            Some((kind, adapter)) => VulkanStatus::Available { adapter, kind },
            None => VulkanStatus::Unavailable {
                reason: "no Vulkan adapter found (install a Vulkan driver; Mesa's lavapipe \
                         runs on the CPU)"
                    .to_owned(),
            },
        }
    }

    /// The first adapter of that kind, as Burn's wgpu runtime numbers them.
    pub(super) fn device(kind: AdapterKind) -> WgpuDevice {
        match kind {
            AdapterKind::Discrete => WgpuDevice::DiscreteGpu(0),
            AdapterKind::Integrated => WgpuDevice::IntegratedGpu(0),
            AdapterKind::Virtual => WgpuDevice::VirtualGpu(0),
            AdapterKind::Software => WgpuDevice::Cpu,
        }
    }
}

#[cfg(feature = "cuda")]
mod driver {
    //! A short conversation with the CUDA driver API: `cuInit`, `cuDeviceGetCount`, then
    //! `cuDeviceGetName` of device 0.

    use super::CudaStatus;

    #[cfg(windows)]
    const LIBRARY: &str = "nvcuda.dll";
    #[cfg(not(windows))]
    const LIBRARY: &str = "libcuda.so.1";

    type CuInit = unsafe extern "C" fn(flags: u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(count: *mut i32) -> i32;
    type CuDeviceGetName = unsafe extern "C" fn(name: *mut u8, length: i32, device: i32) -> i32;

    pub(super) fn probe() -> CudaStatus {
        let unavailable = |reason: String| CudaStatus::Unavailable { reason };
        // SAFETY: loading the CUDA driver runs its initializers, which is what Burn would do on
        // first use anyway; the library stays loaded for the life of the process.
        let library = match unsafe { libloading::Library::new(LIBRARY) } {
            Ok(library) => library,
            Err(error) => {
                return unavailable(format!("no CUDA driver ({LIBRARY} not loadable: {error})"));
            }
        };
        // SAFETY: the symbol types match the CUDA driver API's documented C signatures.
        let (init, count) = unsafe {
            match (
                library.get::<CuInit>(b"cuInit\0"),
                library.get::<CuDeviceGetCount>(b"cuDeviceGetCount\0"),
            ) {
                (Ok(init), Ok(count)) => (init, count),
                _ => return unavailable(format!("{LIBRARY} lacks cuInit or cuDeviceGetCount")),
            }
        };
        // SAFETY: cuInit takes flags (must be 0) and is safe to call repeatedly.
        let status = unsafe { init(0) };
        if status != 0 {
            return unavailable(format!("cuInit failed with CUDA error {status}"));
        }
        let mut devices = 0i32;
        // SAFETY: the pointer is to a live, writable i32.
        let status = unsafe { count(&mut devices) };
        if status != 0 {
            return unavailable(format!("cuDeviceGetCount failed with CUDA error {status}"));
        }
        if devices <= 0 {
            return unavailable("the CUDA driver reports no devices".to_owned());
        }
        let mut name = [0u8; 256];
        // SAFETY: the symbol type matches the driver API's C signature; the buffer is live and
        // its length is passed, so the driver writes at most that many bytes, NUL included.
        let named = unsafe {
            library
                .get::<CuDeviceGetName>(b"cuDeviceGetName\0")
                .map(|get_name| get_name(name.as_mut_ptr(), name.len() as i32, 0) == 0)
                .unwrap_or(false)
        };
        let name = if named {
            let end = name
                .iter()
                .position(|&byte| byte == 0)
                .unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        } else {
            "CUDA device 0".to_owned()
        };
        // Keep the driver loaded: Burn's runtime will use the same library.
        std::mem::forget(library);
        CudaStatus::Available {
            devices: devices as usize,
            name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_selectable() {
        assert_eq!(select(DevicePreference::Cpu).unwrap().name(), "cpu");
    }

    #[test]
    fn selection_tries_cuda_then_wgpu_then_cpu_and_explains() {
        let auto = select(DevicePreference::Auto).unwrap();
        let cuda = cuda_status();
        let vulkan = vulkan_status();
        match (&cuda, &vulkan) {
            (CudaStatus::Available { .. }, _) => assert_eq!(auto.name(), "cuda:0"),
            (
                CudaStatus::Unavailable { .. },
                VulkanStatus::Available {
                    adapter,
                    kind: AdapterKind::Discrete | AdapterKind::Integrated | AdapterKind::Virtual,
                },
            ) => assert_eq!(auto.name(), format!("wgpu: {adapter}")),
            (CudaStatus::Unavailable { reason }, _) => {
                let Selection::Cpu { reason: why } = &auto else {
                    panic!("expected the CPU, got {auto}");
                };
                assert!(why.contains(reason.as_str()), "{why}");
            }
        }
        if let CudaStatus::Unavailable { reason } = cuda {
            let error = select(DevicePreference::Cuda).unwrap_err();
            assert_eq!(error, SelectError::CudaUnavailable { reason });
        }
        match vulkan {
            VulkanStatus::Unavailable { reason } => {
                let error = select(DevicePreference::Wgpu).unwrap_err();
                assert_eq!(error, SelectError::WgpuUnavailable { reason });
            }
            VulkanStatus::Available { adapter, .. } => {
                let chosen = select(DevicePreference::Wgpu).unwrap();
                assert_eq!(chosen.name(), format!("wgpu: {adapter}"));
            }
        }
    }

    #[test]
    fn preferences_parse() {
        assert_eq!("CPU".parse(), Ok(DevicePreference::Cpu));
        assert_eq!("cuda".parse(), Ok(DevicePreference::Cuda));
        assert_eq!("wgpu".parse(), Ok(DevicePreference::Wgpu));
        assert_eq!("Vulkan".parse(), Ok(DevicePreference::Wgpu));
        assert!("tpu".parse::<DevicePreference>().is_err());
    }
}
