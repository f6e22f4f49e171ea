//! Choosing a Burn backend at run time: CUDA after a driver is found, else a Vulkan GPU through
//! wgpu, else flex on the CPU.
//!
//! Burn 0.21's CUDA backend loads `libcuda` lazily, and its wgpu backend asks for an adapter
//! lazily; without one, the first operation panics on a device thread. So kiln never picks a
//! device blindly: [`cuda_status`] loads the driver library and asks it for devices, and
//! [`vulkan_adapters`] lists the Vulkan adapters, before [`select`] chooses, with the reason for
//! each step spelled out. [`DevicePreference::Auto`] follows [`auto_pick`]: CUDA, then a
//! hardware Vulkan adapter, then the pure-Rust `flex` CPU backend (which supports f16 and bf16);
//! it never takes a software Vulkan driver such as Mesa's lavapipe, which is slower than flex on
//! the same CPU. Ask for that one with [`DevicePreference::Wgpu`]: it exercises Burn's GPU code
//! paths (fusion, JIT compilation, the device memory pool, asynchronous readback) without a
//! GPU.
//!
//! The GPU variants of [`Selection`] exist only with the `cuda` and `wgpu` features, and when
//! [`select`] picks a GPU it applies [`GpuTuning`]: CubeCL's caches in a user cache directory,
//! its autotune level, a kernel log. Burn's kernel autotuning itself is compiled in only with
//! the `autotune` feature (off by default: see [`GpuTuning`]).
//!
//! Generic code runs on whichever backend was chosen through [`BackendTask`]:
//!
//! ```
//! use burn::tensor::{Tensor, backend::AutodiffBackend};
//! use kiln_ml_device::{BackendTask, DevicePreference, select};
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

mod auto;
mod cuda;
mod cuda_errors;
mod gpu_tuning;
mod launch_log;
mod preference;
mod select;
mod select_error;
mod selection;
mod vulkan;

pub use auto::{AutoPick, auto_pick, best_gpu_adapter};
pub use cuda::{CudaStatus, cuda_status};
pub use gpu_tuning::{GpuTuning, GpuTuningError};
pub use launch_log::{LaunchLog, Launches};
pub use preference::DevicePreference;
pub use select::select;
pub use select_error::SelectError;
#[cfg(feature = "cuda")]
pub use selection::CudaAutodiff;
#[cfg(feature = "wgpu")]
pub use selection::WgpuAutodiff;
pub use selection::{
    BackendTask, CpuAutodiff, CpuBackend, DevicesTask, Selection, compiled_backends,
};
#[cfg(feature = "wgpu")]
pub use vulkan::wgpu_device;
pub use vulkan::{AdapterKind, VulkanAdapter, VulkanStatus, vulkan_adapters, vulkan_status};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
