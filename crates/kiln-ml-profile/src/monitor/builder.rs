//! The device monitor's settings.

use std::sync::Arc;
use std::time::Duration;

use super::DeviceMonitor;
use super::nvml::GpuChoice;
use super::sampler::SamplerConfig;
use crate::{Clock, Error, MemoryProbe, Result};

/// Settings of a [`DeviceMonitor`], from [`DeviceMonitor::builder`].
///
/// Defaults: a sample every 200 ms, at most 65,536 kept (3.6 hours at that rate; a longer run
/// is thinned evenly); the GPU that is CUDA device 0 in this process; the host's CPU and RAM;
/// no memory probe.
#[derive(Clone)]
pub struct DeviceMonitorBuilder {
    clock: Clock,
    interval: Duration,
    max_samples: usize,
    nvml: bool,
    gpu: GpuChoice,
    host: bool,
    probe: Option<Arc<dyn MemoryProbe>>,
}

impl DeviceMonitor {
    /// Settings for a monitor whose samples are stamped on `clock` (the profile's, so they
    /// line up with the phase timer's spans).
    pub fn builder(clock: Clock) -> DeviceMonitorBuilder {
        DeviceMonitorBuilder::new(clock)
    }
}

impl DeviceMonitorBuilder {
    /// The shortest interval: NVML's counters and sysinfo's reads are not worth more.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
    /// The longest interval: beyond it a phase or an epoch would go unsampled.
    pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
    /// The default interval.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(200);
    /// The default number of samples kept: a few megabytes.
    pub const DEFAULT_MAX_SAMPLES: usize = 65_536;

    pub(crate) fn new(clock: Clock) -> Self {
        Self {
            clock,
            interval: Self::DEFAULT_INTERVAL,
            max_samples: Self::DEFAULT_MAX_SAMPLES,
            nvml: true,
            gpu: GpuChoice::Cuda(0),
            host: true,
            probe: None,
        }
    }

    /// Time between samples, from 10 ms to 60 s (checked by [`start`](Self::start)).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The most samples kept in memory, at least 2 (default 65,536). When a run's samples fill
    /// it, every other one is dropped and from then on every second sample taken is kept, so
    /// the samples still span the whole run at an even interval
    /// ([`DeviceMonitor::kept_every`]); memory stays bounded however long the run.
    pub fn max_samples(mut self, max_samples: usize) -> Self {
        self.max_samples = max_samples;
        self
    }

    /// Whether to read an NVIDIA GPU through NVML (default: yes; without a driver the
    /// source reports why it is unavailable).
    pub fn nvml(mut self, enabled: bool) -> Self {
        self.nvml = enabled;
        self
    }

    /// Reads the GPU that is CUDA device `ordinal` in this process (`cuda:N`; default 0),
    /// found as PyTorch finds it: NVML numbers every GPU of the machine, CUDA only those
    /// `CUDA_VISIBLE_DEVICES` leaves visible, in its order (device numbers, or GPU UUIDs). A
    /// device it hides leaves the source unavailable, saying so.
    pub fn cuda_device(mut self, ordinal: u32) -> Self {
        self.gpu = GpuChoice::Cuda(ordinal);
        self
    }

    /// Reads NVML's device `index` (NVML's order, every GPU of the machine, whatever
    /// `CUDA_VISIBLE_DEVICES` says): see [`cuda_device`](Self::cuda_device) for the GPU a CUDA
    /// device is.
    pub fn nvml_device(mut self, index: u32) -> Self {
        self.gpu = GpuChoice::Nvml(index);
        self
    }

    /// Whether to read the host's CPU utilization and RAM (default: yes).
    pub fn host(mut self, enabled: bool) -> Self {
        self.host = enabled;
        self
    }

    /// A memory source whose readings fill the samples' `pool_in_use_bytes` and
    /// `pool_reserved_bytes`: a `CubePoolProbe` (features `wgpu`, `cuda`), or a
    /// [`HeapProbe`](super::HeapProbe) on a CPU backend.
    pub fn memory_probe(mut self, probe: Arc<dyn MemoryProbe>) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Checks the settings and starts the monitor thread; returns once it has opened its
    /// sources and taken the first sample.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSetting`] for an interval out of range; [`Error::Run`] if the thread
    /// cannot be started.
    pub fn start(self) -> Result<DeviceMonitor> {
        if !(Self::MIN_INTERVAL..=Self::MAX_INTERVAL).contains(&self.interval) {
            return Err(Error::InvalidSetting {
                setting: "device monitor interval",
                message: format!(
                    "{:?} is outside {:?} to {:?}",
                    self.interval,
                    Self::MIN_INTERVAL,
                    Self::MAX_INTERVAL
                ),
            });
        }
        if self.max_samples < 2 {
            return Err(Error::InvalidSetting {
                setting: "device monitor max_samples",
                message: format!("{} is below 2", self.max_samples),
            });
        }
        DeviceMonitor::spawn(SamplerConfig {
            clock: self.clock,
            interval: self.interval,
            max_samples: self.max_samples,
            gpu: self.nvml.then_some(self.gpu),
            host: self.host,
            probe: self.probe,
        })
    }
}

impl std::fmt::Debug for DeviceMonitorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMonitorBuilder")
            .field("interval", &self.interval)
            .field("max_samples", &self.max_samples)
            .field("nvml", &self.nvml)
            .field("gpu", &self.gpu)
            .field("host", &self.host)
            .field("probe", &self.probe.as_ref().map(|probe| probe.name()))
            .finish()
    }
}
