//! Choosing a Burn backend at run time: CUDA only after a driver is found, flex otherwise.
//!
//! Burn 0.21's CUDA backend loads `libcuda` lazily; without a driver the first CUDA operation
//! panics on a device thread. So kiln never picks CUDA blindly: [`cuda_status`] loads the driver
//! library and asks it for devices first, and [`select`] falls back to the pure-Rust `flex` CPU
//! backend (which supports f16 and bf16) with the reason spelled out.
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
use burn::tensor::backend::AutodiffBackend;

/// The CPU backend: Burn's pure-Rust `flex`, with f16 and bf16 support.
pub type CpuBackend = burn::backend::Flex;

/// The CPU backend with autodiff, for training.
pub type CpuAutodiff = Autodiff<CpuBackend>;

/// The CUDA backend (fusion and autotune on), for training with autodiff.
#[cfg(feature = "cuda")]
pub type CudaAutodiff = Autodiff<burn::backend::Cuda>;

/// Which device the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePreference {
    /// CUDA device 0 when a driver and a device are found, the CPU otherwise.
    #[default]
    Auto,
    /// The CPU, always.
    Cpu,
    /// A CUDA device; an error when none can be used.
    Cuda,
}

impl FromStr for DevicePreference {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" | "flex" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda),
            other => Err(format!("unknown device {other:?}: use auto, cpu or cuda")),
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
    },
    /// CUDA cannot be used.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
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
}

impl Selection {
    /// A short name: `cpu` or `cuda:N`.
    pub fn name(&self) -> String {
        match self {
            Selection::Cpu { .. } => "cpu".to_owned(),
            Selection::Cuda { index } => format!("cuda:{index}"),
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
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selection::Cpu { reason } => write!(f, "cpu (flex): {reason}"),
            Selection::Cuda { index } => write!(f, "cuda:{index}"),
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

/// Picks the device for a preference; only [`DevicePreference::Cuda`] can fail.
pub fn select(preference: DevicePreference) -> Result<Selection, String> {
    let reason = match preference {
        // Answered without probing: the CPU needs no driver, and `cuInit` can take seconds.
        DevicePreference::Cpu => "requested".to_owned(),
        DevicePreference::Auto | DevicePreference::Cuda => match cuda_status() {
            CudaStatus::Available { .. } => return Ok(Selection::Cuda { index: 0 }),
            CudaStatus::Unavailable { reason } if preference == DevicePreference::Cuda => {
                return Err(format!("CUDA was requested but cannot be used: {reason}"));
            }
            CudaStatus::Unavailable { reason } => reason,
        },
    };
    Ok(Selection::Cpu { reason })
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

#[cfg(feature = "cuda")]
mod driver {
    //! A two-call conversation with the CUDA driver API: `cuInit`, then `cuDeviceGetCount`.

    use super::CudaStatus;

    #[cfg(windows)]
    const LIBRARY: &str = "nvcuda.dll";
    #[cfg(not(windows))]
    const LIBRARY: &str = "libcuda.so.1";

    type CuInit = unsafe extern "C" fn(flags: u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(count: *mut i32) -> i32;

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
        // Keep the driver loaded: Burn's runtime will use the same library.
        std::mem::forget(library);
        if devices <= 0 {
            return unavailable("the CUDA driver reports no devices".to_owned());
        }
        CudaStatus::Available {
            devices: devices as usize,
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
    fn auto_never_fails_and_cuda_fails_only_with_a_reason() {
        let auto = select(DevicePreference::Auto).unwrap();
        match cuda_status() {
            CudaStatus::Available { .. } => assert_eq!(auto.name(), "cuda:0"),
            CudaStatus::Unavailable { reason } => {
                assert_eq!(
                    auto,
                    Selection::Cpu {
                        reason: reason.clone()
                    }
                );
                let error = select(DevicePreference::Cuda).unwrap_err();
                assert!(error.contains(&reason), "{error}");
            }
        }
    }

    #[test]
    fn preferences_parse() {
        assert_eq!("CPU".parse(), Ok(DevicePreference::Cpu));
        assert_eq!("cuda".parse(), Ok(DevicePreference::Cuda));
        assert!("tpu".parse::<DevicePreference>().is_err());
    }
}
