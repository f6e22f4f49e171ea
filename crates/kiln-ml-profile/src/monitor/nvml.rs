//! NVIDIA GPUs through NVML, opened at run time: the monitor's per-sample readings and the
//! list of GPUs the doctor reports.
//!
//! `nvml-wrapper` loads `libnvidia-ml.so.1` when [`Nvml::init`] is called, so kiln builds and
//! runs without a driver; every failure becomes a reason string, never a panic.

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::Clock as NvmlClock;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};

use super::read_failures::ReadFailures;
use super::visible_devices::{CudaNumber, CudaOrder, VARIABLE};
use super::{DeviceSample, SourceStatus};

/// The source name in [`SourceStatus`].
pub(crate) const NAME: &str = "nvml";

/// One NVIDIA GPU as NVML describes it. A figure NVML refuses is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML's device index.
    pub index: u32,
    /// The CUDA device number this GPU has in this process (`cuda:N`), through
    /// `CUDA_VISIBLE_DEVICES`; `None` when that hides it or when it is not known (see
    /// `hidden_from_cuda`).
    #[serde(default)]
    pub cuda_device: Option<u32>,
    /// Whether `CUDA_VISIBLE_DEVICES` hides this GPU from CUDA. False where that is not known
    /// (MIG instances named, NVML's UUIDs unreadable, a report from before this field).
    #[serde(default)]
    pub hidden_from_cuda: bool,
    /// The product name (`NVIDIA H100 80GB HBM3`).
    pub name: Option<String>,
    /// Device memory in all, in bytes.
    pub memory_total_bytes: Option<u64>,
    /// The driver's version (the same for every GPU of the machine).
    pub driver_version: Option<String>,
    /// The CUDA compute capability as (major, minor): `(9, 0)` for a Hopper GPU.
    pub cuda_compute_capability: Option<(i32, i32)>,
    /// CUDA cores.
    pub cores: Option<u32>,
    /// The highest streaming-multiprocessor clock, in MHz.
    pub max_sm_clock_mhz: Option<u32>,
}

/// Every GPU NVML sees, or why NVML cannot be used (no driver: `libnvidia-ml.so.1: cannot open
/// shared object file: No such file or directory`). Initialises NVML for the call; keep the
/// result rather than calling it in a loop.
pub fn nvml_gpus() -> Result<Vec<GpuInfo>, String> {
    let nvml = Nvml::init().map_err(|error| describe(&error))?;
    let count = nvml.device_count().map_err(|error| describe(&error))?;
    let driver_version = nvml.sys_driver_version().ok();
    let visible = std::env::var(VARIABLE).ok();
    let order = CudaOrder::read(visible.as_deref(), count, || uuids(&nvml, count));
    Ok((0..count)
        .map(|index| {
            let device = nvml.device_by_index(index).ok();
            let cuda = order.cuda_number(index);
            GpuInfo {
                index,
                cuda_device: match cuda {
                    CudaNumber::Visible(ordinal) => Some(ordinal),
                    CudaNumber::Hidden | CudaNumber::Unknown => None,
                },
                hidden_from_cuda: cuda == CudaNumber::Hidden,
                name: device.as_ref().and_then(|d| d.name().ok()),
                memory_total_bytes: device
                    .as_ref()
                    .and_then(|d| d.memory_info().ok())
                    .map(|m| m.total),
                driver_version: driver_version.clone(),
                cuda_compute_capability: device
                    .as_ref()
                    .and_then(|d| d.cuda_compute_capability().ok())
                    .map(|c| (c.major, c.minor)),
                cores: device.as_ref().and_then(|d| d.num_cores().ok()),
                max_sm_clock_mhz: device
                    .as_ref()
                    .and_then(|d| d.max_clock_info(NvmlClock::SM).ok()),
            }
        })
        .collect())
}

/// Which GPU the monitor reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuChoice {
    /// CUDA device `N` of this process, found through `CUDA_VISIBLE_DEVICES`.
    Cuda(u32),
    /// NVML's device `N`.
    Nvml(u32),
}

/// The UUIDs of NVML's `count` devices, in NVML's order.
fn uuids(nvml: &Nvml, count: u32) -> Result<Vec<String>, String> {
    (0..count)
        .map(|index| {
            nvml.device_by_index(index)
                .and_then(|device| device.uuid())
                .map_err(|error| format!("the UUID of GPU {index}: {}", describe(&error)))
        })
        .collect()
}

/// The monitor's NVML source: one initialised library handle and the device it samples.
pub(crate) struct NvmlSource {
    nvml: Nvml,
    index: u32,
    /// How the device was chosen, for the status: `CUDA device 0`, or nothing for NVML's own
    /// index.
    chosen_as: Option<String>,
    gpu_name: Option<String>,
    /// Why memory figures are missing (an old driver without `nvmlDeviceGetMemoryInfo_v2`).
    memory_missing: Option<String>,
    /// Reads that failed after opening (a figure the GPU does not report, a GPU lost).
    failures: ReadFailures,
}

impl NvmlSource {
    /// Initialises NVML (expensive: once per monitor), finds the chosen device and checks that
    /// it answers.
    pub(crate) fn open(choice: GpuChoice) -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|error| describe(&error))?;
        let (index, chosen_as) = match choice {
            GpuChoice::Nvml(index) => (index, None),
            GpuChoice::Cuda(ordinal) => {
                let visible = std::env::var(VARIABLE).ok();
                let count = nvml.device_count().map_err(|error| describe(&error))?;
                let order = CudaOrder::read(visible.as_deref(), count, || uuids(&nvml, count));
                let index = order.nvml_index(ordinal)?;
                (index, Some(format!("CUDA device {ordinal}")))
            }
        };
        let device = nvml
            .device_by_index(index)
            .map_err(|error| format!("GPU {index}: {}", describe(&error)))?;
        let gpu_name = device.name().ok();
        let memory_missing = match device.memory_info() {
            Err(error @ NvmlError::FailedToLoadSymbol(_)) => Some(describe(&error)),
            _ => None,
        };
        Ok(Self {
            nvml,
            index,
            chosen_as,
            gpu_name,
            memory_missing,
            failures: ReadFailures::default(),
        })
    }

    /// The source's state for the monitor's record.
    pub(crate) fn status(&self) -> SourceStatus {
        let gpu = self.gpu_name.as_deref().unwrap_or("unnamed GPU");
        let device = match &self.chosen_as {
            Some(chosen_as) => format!("{chosen_as}, NVML device {}", self.index),
            None => format!("device {}", self.index),
        };
        let mut status = SourceStatus::available(NAME, Some(format!("{gpu}, {device}")));
        let memory = self
            .memory_missing
            .as_ref()
            .map(|why| format!("memory figures unavailable: {why}"));
        let reasons: Vec<String> = memory.into_iter().chain(self.failures.describe()).collect();
        status.reason = (!reasons.is_empty()).then(|| reasons.join("; "));
        status
    }

    /// Fills the `gpu_*` fields it can read; a call that fails leaves its field `None` and is
    /// counted for [`status`](Self::status).
    pub(crate) fn read(&mut self, sample: &mut DeviceSample) {
        let failures = &mut self.failures;
        let Some(device) = failures.keep("device", self.nvml.device_by_index(self.index)) else {
            return;
        };
        sample.gpu_utilization_percent = failures
            .keep("utilization", device.utilization_rates())
            .map(|rates| f64::from(rates.gpu));
        if self.memory_missing.is_none() {
            match device.memory_info() {
                Ok(memory) => {
                    sample.gpu_memory_used_bytes = Some(memory.used);
                    sample.gpu_memory_total_bytes = Some(memory.total);
                }
                Err(error @ NvmlError::FailedToLoadSymbol(_)) => {
                    self.memory_missing = Some(describe(&error));
                }
                Err(error) => failures.record("memory", describe(&error)),
            }
        }
        sample.gpu_power_watts = failures
            .keep("power", device.power_usage())
            .map(|milliwatts| f64::from(milliwatts) / 1000.0);
        sample.gpu_sm_clock_mhz = failures.keep("SM clock", device.clock_info(NvmlClock::SM));
        sample.gpu_throttle_reasons = failures
            .keep("throttle reasons", device.current_throttle_reasons())
            .map(throttle_names);
    }
}

/// NVML's error as a reason for a report. A failed `dlopen` reads as the loader's own message
/// (`libnvidia-ml.so.1: cannot open shared object file: ...`), without the wrapper's "a
/// libloading error occurred: " in front of it.
pub(crate) fn describe(error: &NvmlError) -> String {
    if let NvmlError::LibloadingError(load) = error {
        return load.to_string();
    }
    error.to_string()
}

/// The snake_case names of the reasons the clocks are held down; empty when none.
fn throttle_names(reasons: ThrottleReasons) -> Vec<String> {
    // `USER_DEFINED_CLOCKS` is the old name of `APPLICATIONS_CLOCKS_SETTING` (same bit).
    const NAMES: [(ThrottleReasons, &str); 9] = [
        (ThrottleReasons::GPU_IDLE, "gpu_idle"),
        (
            ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (
            ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
        ),
        (
            ThrottleReasons::DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
        ),
    ];
    NAMES
        .iter()
        .filter(|(flag, _)| reasons.contains(*flag))
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_reasons_are_named_in_snake_case() {
        let reasons = ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_THERMAL_SLOWDOWN;
        assert_eq!(
            throttle_names(reasons),
            ["sw_power_cap", "hw_thermal_slowdown"]
        );
        assert!(throttle_names(ThrottleReasons::NONE).is_empty());
    }

    #[test]
    fn a_failed_load_reads_as_the_loaders_message() {
        let path = std::ffi::OsStr::new("/nonexistent/libnvidia-ml.so.1");
        let error = Nvml::builder()
            .lib_path(path)
            .init()
            .expect_err("no library at that path");
        assert!(matches!(error, NvmlError::LibloadingError(_)), "{error}");
        let reason = describe(&error);
        assert!(
            !reason.is_empty() && !reason.contains("libloading"),
            "{reason}"
        );
        #[cfg(target_os = "linux")]
        assert!(
            reason.contains("/nonexistent/libnvidia-ml.so.1"),
            "{reason}"
        );
    }

    #[test]
    fn a_missing_driver_is_a_reason_not_a_panic() {
        // On a machine with a driver both calls succeed; the point is that neither panics and
        // a failure carries a message.
        match (nvml_gpus(), NvmlSource::open(GpuChoice::Nvml(0))) {
            (Err(reason), Err(again)) => {
                assert!(!reason.is_empty());
                assert_eq!(reason, again);
            }
            (Ok(gpus), source) => {
                assert_eq!(gpus.is_empty(), source.is_err());
            }
            (Err(reason), Ok(_)) => panic!("nvml_gpus failed ({reason}) where the source opened"),
        }
    }
}
