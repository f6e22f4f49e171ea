//! One reading of the device monitor.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the monitor read at one instant. Every figure is optional: a source that is
/// unavailable leaves its fields `None` (the monitor's report says why).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceSample {
    /// When, as an offset from the profile's [`Clock`](crate::Clock).
    #[serde(with = "crate::serde_seconds")]
    pub at: Duration,
    /// NVML: percent of the sample period in which a kernel ran (busy time, not occupancy).
    pub gpu_utilization_percent: Option<f64>,
    /// NVML: device memory used, in bytes.
    pub gpu_memory_used_bytes: Option<u64>,
    /// NVML: device memory in all, in bytes.
    pub gpu_memory_total_bytes: Option<u64>,
    /// NVML: board power draw, in watts.
    pub gpu_power_watts: Option<f64>,
    /// NVML: streaming-multiprocessor clock, in MHz.
    pub gpu_sm_clock_mhz: Option<u32>,
    /// NVML: why the clocks are held down (`sw_power_cap`, `hw_slowdown`, ...); empty when none.
    pub gpu_throttle_reasons: Option<Vec<String>>,
    /// The memory probe's figures (Burn's CubeCL pool on wgpu/CUDA, the heap with
    /// [`HeapProbe`](super::HeapProbe)): bytes held by live allocations (tensors).
    pub pool_in_use_bytes: Option<u64>,
    /// The memory probe's figures (Burn's CubeCL pool on wgpu/CUDA, the heap with
    /// [`HeapProbe`](super::HeapProbe)): bytes reserved from the device or the OS (the heap
    /// reports its allocated bytes for both).
    pub pool_reserved_bytes: Option<u64>,
    /// Host CPU utilization over all cores, in percent.
    pub cpu_utilization_percent: Option<f64>,
    /// Host RAM in use, in bytes.
    pub ram_used_bytes: Option<u64>,
    /// Host RAM in all, in bytes.
    pub ram_total_bytes: Option<u64>,
}

impl DeviceSample {
    /// Every numeric figure by its field name, in declaration order: what summaries cover.
    /// (The throttle reasons, being names, are counted apart.)
    pub fn numeric_fields(&self) -> [(&'static str, Option<f64>); 10] {
        let bytes = |value: Option<u64>| value.map(|bytes| bytes as f64);
        [
            ("gpu_utilization_percent", self.gpu_utilization_percent),
            ("gpu_memory_used_bytes", bytes(self.gpu_memory_used_bytes)),
            ("gpu_memory_total_bytes", bytes(self.gpu_memory_total_bytes)),
            ("gpu_power_watts", self.gpu_power_watts),
            ("gpu_sm_clock_mhz", self.gpu_sm_clock_mhz.map(f64::from)),
            ("pool_in_use_bytes", bytes(self.pool_in_use_bytes)),
            ("pool_reserved_bytes", bytes(self.pool_reserved_bytes)),
            ("cpu_utilization_percent", self.cpu_utilization_percent),
            ("ram_used_bytes", bytes(self.ram_used_bytes)),
            ("ram_total_bytes", bytes(self.ram_total_bytes)),
        ]
    }
}
