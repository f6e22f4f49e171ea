//! The host's CPU utilization and RAM through sysinfo.

use std::time::Instant;

use sysinfo::{MINIMUM_CPU_UPDATE_INTERVAL, System};

use super::SourceStatus;

/// The source name in [`SourceStatus`].
pub(crate) const NAME: &str = "host";

/// One reading of the host.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct HostReading {
    /// CPU utilization over all cores since the previous CPU refresh; `None` until there have
    /// been two refreshes.
    pub(crate) cpu_utilization_percent: Option<f64>,
    /// RAM in use, in bytes.
    pub(crate) ram_used_bytes: u64,
    /// RAM in all, in bytes.
    pub(crate) ram_total_bytes: u64,
}

/// A sysinfo `System` refreshed for CPU usage and memory only (processes, disks and networks
/// would cost far more per sample).
pub(crate) struct HostSource {
    system: System,
    last_cpu_refresh: Option<Instant>,
    cpu_utilization_percent: Option<f64>,
}

impl HostSource {
    /// A source that has read nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            system: System::new(),
            last_cpu_refresh: None,
            cpu_utilization_percent: None,
        }
    }

    /// The source's state for the monitor's record.
    pub(crate) fn status(&self) -> SourceStatus {
        if !sysinfo::IS_SUPPORTED_SYSTEM {
            return SourceStatus::unavailable(NAME, "sysinfo does not support this system");
        }
        let gib = self.system.total_memory() as f64 / f64::from(1u32 << 30);
        let cpus = self.system.cpus().len();
        SourceStatus::available(NAME, Some(format!("{cpus} CPUs, {gib:.1} GiB RAM")))
    }

    /// Reads memory, and CPU usage where the last CPU refresh is at least 90% of
    /// `MINIMUM_CPU_UPDATE_INTERVAL` old (a monitor sampling at exactly that interval reads a
    /// little early or late each time; without the slack it would skip every other refresh).
    /// Usage is a difference of two refreshes, so the first reading has none; between
    /// refreshes (shorter intervals) the last figure is repeated.
    pub(crate) fn read(&mut self) -> HostReading {
        let now = Instant::now();
        match self.last_cpu_refresh {
            None => {
                self.system.refresh_cpu_usage();
                self.last_cpu_refresh = Some(now);
            }
            Some(last) if now.duration_since(last) >= MINIMUM_CPU_UPDATE_INTERVAL * 9 / 10 => {
                self.system.refresh_cpu_usage();
                self.last_cpu_refresh = Some(now);
                self.cpu_utilization_percent = Some(f64::from(self.system.global_cpu_usage()));
            }
            Some(_) => {}
        }
        self.system.refresh_memory();
        HostReading {
            cpu_utilization_percent: self.cpu_utilization_percent,
            ram_used_bytes: self.system.used_memory(),
            ram_total_bytes: self.system.total_memory(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_usage_needs_two_refreshes() {
        let mut host = HostSource::new();
        let first = host.read();
        assert_eq!(first.cpu_utilization_percent, None);
        assert!(first.ram_total_bytes > 0);
        assert!(first.ram_used_bytes <= first.ram_total_bytes);

        std::thread::sleep(MINIMUM_CPU_UPDATE_INTERVAL);
        let second = host.read();
        let cpu = second
            .cpu_utilization_percent
            .expect("a second refresh gives usage");
        assert!((0.0..=100.0).contains(&cpu), "{cpu}");
        assert!(host.status().available, "{}", host.status());
    }
}
