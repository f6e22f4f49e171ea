//! What the doctor found: the machine's parts, each source's status, and the advice.

use kiln_ml_device::VulkanAdapter;
use serde::{Deserialize, Serialize};

use super::recommend::Recommendations;
use crate::monitor::{GpuInfo, SourceStatus};

/// The doctor's report on this machine; serialized with snake_case names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemReport {
    /// The processor.
    pub cpu: CpuSummary,
    /// The host memory.
    pub ram: RamSummary,
    /// Whether NVML (the NVIDIA driver's management library) answered, and if not, why.
    pub nvml: SourceStatus,
    /// The NVIDIA GPUs NVML lists, in NVML's order (empty without NVML).
    pub gpus: Vec<GpuInfo>,
    /// Whether Vulkan adapters could be listed (needs the `wgpu` feature), and if not, why.
    pub vulkan: SourceStatus,
    /// The Vulkan adapters wgpu lists, software ones (lavapipe) included.
    pub vulkan_adapters: Vec<VulkanAdapter>,
    /// The Burn backends the program was built with, as the caller named them.
    pub burn_backends: Vec<String>,
    /// Settings to start from, each with its reason.
    pub recommendations: Recommendations,
}

/// The processor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSummary {
    /// The model name the OS reports (`AMD EPYC 7763 64-Core Processor`); empty when unknown.
    pub model: String,
    /// Physical cores of the machine (the logical count when the OS does not say).
    pub physical_cores: usize,
    /// Logical cores (hardware threads) of the machine.
    pub logical_cores: usize,
    /// Cores this process may use: fewer than the machine's under a CPU affinity mask or a
    /// container's CPU quota.
    pub available_cores: usize,
}

/// The host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RamSummary {
    /// RAM in all, in bytes.
    pub total_bytes: u64,
    /// RAM that can be allocated without swapping, in bytes.
    pub available_bytes: u64,
}
