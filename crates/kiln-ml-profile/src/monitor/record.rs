//! What a device monitor leaves behind: its samples and the state of each source.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::DeviceSample;

/// Whether one source of the monitor (`nvml`, `wgpu pool`, `host`, ...) could be read, and
/// why not. Displays as `nvml: unavailable (libnvidia-ml.so.1: cannot open shared object
/// file: ...)` or `nvml: available (NVIDIA H100 80GB HBM3, CUDA device 0, NVML device 0)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// The source: `nvml`, `host`, or a memory probe's name (`wgpu pool`, `heap`).
    pub name: String,
    /// Whether the source gave readings.
    pub available: bool,
    /// Why it is unavailable, or which of its figures are missing.
    pub reason: Option<String>,
    /// What was read: the GPU's name, the host's CPU count.
    pub detail: Option<String>,
}

impl SourceStatus {
    /// A source that gives readings.
    pub fn available(name: impl Into<String>, detail: Option<String>) -> Self {
        Self {
            name: name.into(),
            available: true,
            reason: None,
            detail,
        }
    }

    /// A source that cannot be read, and why.
    pub fn unavailable(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            available: false,
            reason: Some(reason.into()),
            detail: None,
        }
    }
}

impl fmt::Display for SourceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.available {
            "available"
        } else {
            "unavailable"
        };
        write!(f, "{}: {state}", self.name)?;
        let notes: Vec<&str> = [self.detail.as_deref(), self.reason.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !notes.is_empty() {
            write!(f, " ({})", notes.join("; "))?;
        }
        Ok(())
    }
}

/// Everything a stopped [`DeviceMonitor`](super::DeviceMonitor) read.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MonitorRecord {
    /// The samples, oldest first.
    pub samples: Vec<DeviceSample>,
    /// Each source the monitor tried, with whether it could be read.
    pub sources: Vec<SourceStatus>,
}

impl MonitorRecord {
    /// The status of the source named `name`, if the monitor tried it.
    pub fn source(&self, name: &str) -> Option<&SourceStatus> {
        self.sources.iter().find(|source| source.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_say_why() {
        let missing = SourceStatus::unavailable("nvml", "libnvidia-ml.so.1: cannot open");
        assert_eq!(
            missing.to_string(),
            "nvml: unavailable (libnvidia-ml.so.1: cannot open)"
        );
        let gpu = SourceStatus::available("nvml", Some("NVIDIA A100, device 0".into()));
        assert_eq!(gpu.to_string(), "nvml: available (NVIDIA A100, device 0)");
        assert_eq!(
            SourceStatus::available("host", None).to_string(),
            "host: available"
        );
    }

    #[test]
    fn a_record_round_trips_through_json() {
        let record = MonitorRecord {
            samples: vec![DeviceSample {
                pool_in_use_bytes: Some(4 << 20),
                ..DeviceSample::default()
            }],
            sources: vec![SourceStatus::unavailable("nvml", "no driver")],
        };
        let json = serde_json::to_string(&record).expect("encodes");
        let back: MonitorRecord = serde_json::from_str(&json).expect("decodes");
        assert_eq!(back, record);
        assert_eq!(back.source("nvml").map(|s| s.available), Some(false));
    }
}
