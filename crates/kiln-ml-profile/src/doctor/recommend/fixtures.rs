//! Machines for the recommendation tests: GPUs, Vulkan adapters and CPUs as the doctor would
//! read them.

use kiln_ml_device::{AdapterKind, VulkanAdapter};

use super::super::report::{CpuSummary, RamSummary};
use super::{Recommendations, recommend};
use crate::monitor::GpuInfo;

/// An NVIDIA GPU as NVML would list it.
pub(super) fn gpu(name: &str, capability: (i32, i32), memory_gib: u64) -> GpuInfo {
    GpuInfo {
        index: 0,
        cuda_device: Some(0),
        hidden_from_cuda: false,
        name: Some(name.to_owned()),
        memory_total_bytes: Some(memory_gib << 30),
        driver_version: Some("550.54.15".to_owned()),
        cuda_compute_capability: Some(capability),
        cores: None,
        max_sm_clock_mhz: None,
    }
}

/// A Vulkan adapter as wgpu would list it.
pub(super) fn adapter(name: &str, kind: AdapterKind) -> VulkanAdapter {
    VulkanAdapter {
        name: name.to_owned(),
        kind,
        driver: String::new(),
        backend: "vulkan".to_owned(),
    }
}

/// A CPU with `physical` cores of which this process may use `available`.
pub(super) fn cpu(physical: usize, available: usize) -> CpuSummary {
    CpuSummary {
        model: "test".to_owned(),
        physical_cores: physical,
        logical_cores: physical * 2,
        available_cores: available,
    }
}

/// 64 GiB, half of it available.
pub(super) const RAM: RamSummary = RamSummary {
    total_bytes: 64 << 30,
    available_bytes: 32 << 30,
};

/// The advice for a 16-core machine with [`RAM`], these GPUs and adapters, and these backends
/// built in.
pub(super) fn advise(
    gpus: &[GpuInfo],
    adapters: &[VulkanAdapter],
    backends: &[&str],
) -> Recommendations {
    let backends: Vec<String> = backends.iter().map(|b| (*b).to_owned()).collect();
    recommend(&cpu(16, 16), &RAM, gpus, adapters, &backends)
}
