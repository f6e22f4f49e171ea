//! The doctor: what this machine offers for training, and settings to start from.
//!
//! [`doctor`] reads the CPU and RAM (sysinfo), the NVIDIA GPUs (NVML, loaded at run time), the
//! Vulkan adapters (wgpu, with the `wgpu` feature) and the Burn backends the caller was built
//! with, and recommends a kiln-ml-train preset, a precision, a number of loader workers and how
//! to find the batch size, each with a one-line reason. A source that cannot be read says why
//! instead of failing:
//!
//! ```
//! use kiln_ml_profile::{DoctorOptions, doctor};
//!
//! let report = doctor(&DoctorOptions::new(["flex"]));
//! assert!(report.cpu.logical_cores >= 1);
//! assert!(report.nvml.available || report.nvml.reason.is_some());
//! println!("{}", report.to_text());
//! ```

mod probe;
mod recommend;
mod report;
mod text;
mod vulkan;

pub use probe::{DoctorOptions, doctor};
pub use recommend::{BatchAdvice, Recommendation, Recommendations};
pub use report::{CpuSummary, RamSummary, SystemReport};
