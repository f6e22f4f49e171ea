//! The device monitor: a background thread sampling NVML, a memory probe (Burn's CubeCL pool,
//! the process heap) and the host's CPU and RAM, with min/mean/max summaries per phase and per
//! epoch.

mod builder;
mod device_monitor;
mod device_probe;
mod heap;
mod host;
mod nvml;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod pool;
mod read_failures;
mod record;
mod sample;
mod sample_log;
mod sampler;
mod summary;
mod visible_devices;

pub use builder::DeviceMonitorBuilder;
pub use device_monitor::{DeviceMonitor, MONITOR_THREAD_NAME};
pub use device_probe::device_memory_probe;
pub use heap::{HeapProbe, PeakAlloc};
pub use nvml::{GpuInfo, nvml_gpus};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use pool::CubePoolProbe;
pub use record::{MonitorRecord, SourceStatus};
pub use sample::DeviceSample;
pub use summary::{
    MonitorStats, MonitorSummary, summaries_by_epoch, summaries_by_phase, summarize_samples,
};
