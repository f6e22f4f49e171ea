//! The monitor thread's side: its sources, one sample from all of them, and the loop.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::host::HostSource;
use super::nvml::{self, GpuChoice, NvmlSource};
use super::sample_log::SampleLog;
use super::{DeviceSample, SourceStatus};
use crate::{Clock, MemoryProbe};

/// What the monitor thread is asked to read.
pub(crate) struct SamplerConfig {
    pub(crate) clock: Clock,
    pub(crate) interval: Duration,
    /// The most samples kept (a longer run is thinned evenly).
    pub(crate) max_samples: usize,
    /// The GPU NVML is read for, or `None` for no NVML.
    pub(crate) gpu: Option<GpuChoice>,
    pub(crate) host: bool,
    pub(crate) probe: Option<Arc<dyn MemoryProbe>>,
}

/// A memory probe and what its reads have said so far.
struct ProbeSource {
    probe: Arc<dyn MemoryProbe>,
    status: Option<SourceStatus>,
    failed_reads: u64,
}

impl ProbeSource {
    fn read(&mut self, sample: &mut DeviceSample) {
        match self.probe.read() {
            Ok(reading) => {
                sample.pool_in_use_bytes = Some(reading.in_use_bytes);
                sample.pool_reserved_bytes = Some(reading.reserved_bytes);
                let status = self
                    .status
                    .get_or_insert_with(|| SourceStatus::available(self.probe.name(), None));
                if !status.available {
                    // Failed reads before the first good one: the source gives readings after
                    // all, and its reason keeps what failed.
                    status.available = true;
                    let last = status.reason.take().unwrap_or_default();
                    status.reason = Some(format!(
                        "{} reads failed, the last: {last}",
                        self.failed_reads
                    ));
                }
            }
            Err(reason) => {
                self.failed_reads += 1;
                let status = self
                    .status
                    .get_or_insert_with(|| SourceStatus::unavailable(self.probe.name(), ""));
                status.reason = Some(if status.available {
                    format!("{} reads failed, the last: {reason}", self.failed_reads)
                } else {
                    reason
                });
            }
        }
    }
}

/// The monitor thread's sources. An NVML source that failed to open is kept as its status.
pub(crate) struct Sources {
    nvml: Option<Result<NvmlSource, SourceStatus>>,
    probe: Option<ProbeSource>,
    host: Option<HostSource>,
}

impl Sources {
    /// Opens every source asked for; NVML is initialised here, on the monitor thread.
    pub(crate) fn open(config: &SamplerConfig) -> Self {
        let nvml = config.gpu.map(|choice| {
            NvmlSource::open(choice).map_err(|reason| {
                log::info!("device monitor: nvml unavailable ({reason})");
                SourceStatus::unavailable(nvml::NAME, reason)
            })
        });
        Self {
            nvml,
            probe: config.probe.clone().map(|probe| ProbeSource {
                probe,
                status: None,
                failed_reads: 0,
            }),
            host: config.host.then(HostSource::new),
        }
    }

    /// One sample of every source, stamped at its start.
    pub(crate) fn sample(&mut self, clock: &Clock) -> DeviceSample {
        let mut sample = DeviceSample {
            at: clock.now(),
            ..DeviceSample::default()
        };
        if let Some(Ok(nvml)) = &mut self.nvml {
            nvml.read(&mut sample);
        }
        if let Some(probe) = &mut self.probe {
            probe.read(&mut sample);
        }
        if let Some(host) = &mut self.host {
            let reading = host.read();
            sample.cpu_utilization_percent = reading.cpu_utilization_percent;
            // No total means no reading (an unsupported system, an unreadable /proc/meminfo):
            // absent, not zero.
            if reading.ram_total_bytes > 0 {
                sample.ram_used_bytes = Some(reading.ram_used_bytes);
                sample.ram_total_bytes = Some(reading.ram_total_bytes);
            }
        }
        sample
    }

    /// The state of each source: NVML, the memory probe, the host.
    pub(crate) fn statuses(&self) -> Vec<SourceStatus> {
        let nvml = self.nvml.as_ref().map(|nvml| match nvml {
            Ok(source) => source.status(),
            Err(status) => status.clone(),
        });
        let probe = self.probe.as_ref().map(|probe| {
            probe
                .status
                .clone()
                .unwrap_or_else(|| SourceStatus::unavailable(probe.probe.name(), "not read yet"))
        });
        let host = self.host.as_ref().map(HostSource::status);
        [nvml, probe, host].into_iter().flatten().collect()
    }
}

/// The monitor thread: opens the sources, samples at once and reports the sources' states
/// through `ready`, then samples every `interval` (on a fixed grid; ticks missed while a
/// sample ran late are skipped) until `stop` is dropped. Returns the sources' final states.
pub(crate) fn run(
    config: SamplerConfig,
    samples: Arc<Mutex<SampleLog>>,
    stop: Receiver<()>,
    ready: Sender<Vec<SourceStatus>>,
) -> Vec<SourceStatus> {
    let mut sources = Sources::open(&config);
    let push = |sample| {
        samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sample);
    };
    let first = Instant::now();
    push(sources.sample(&config.clock));
    // The builder waits for this; if it is gone, the samples are still kept for `stop`.
    let _ = ready.send(sources.statuses());
    let mut ticks: u32 = 1;
    loop {
        let now = Instant::now();
        let mut next = first + config.interval * ticks;
        while next <= now {
            ticks += 1;
            next = first + config.interval * ticks;
        }
        match stop.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {
                ticks += 1;
                push(sources.sample(&config.clock));
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    sources.statuses()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryReading;

    struct Flaky;

    impl MemoryProbe for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn read(&self) -> Result<MemoryReading, String> {
            Err("the pool is gone".into())
        }
    }

    #[test]
    fn a_failing_probe_is_unavailable_with_its_reason_and_the_host_still_reads() {
        let config = SamplerConfig {
            clock: Clock::start(),
            interval: Duration::from_millis(20),
            max_samples: 100,
            gpu: None,
            host: true,
            probe: Some(Arc::new(Flaky)),
        };
        let mut sources = Sources::open(&config);
        let sample = sources.sample(&config.clock);
        assert_eq!(sample.pool_in_use_bytes, None);
        assert!(sample.ram_total_bytes.is_some());
        let statuses = sources.statuses();
        assert_eq!(
            statuses[0],
            SourceStatus::unavailable("flaky", "the pool is gone")
        );
        assert_eq!(statuses[1].name, "host");
    }

    /// Fails its first `failures` reads, then reads.
    struct FailsFirst {
        failures: u64,
        calls: std::sync::atomic::AtomicU64,
    }

    impl MemoryProbe for FailsFirst {
        fn name(&self) -> &str {
            "flaky"
        }
        fn read(&self) -> Result<MemoryReading, String> {
            let call = self
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if call < self.failures {
                Err(format!("busy at read {call}"))
            } else {
                Ok(MemoryReading::default())
            }
        }
    }

    #[test]
    fn a_probe_that_reads_after_failing_first_is_available_and_keeps_what_failed() {
        let config = SamplerConfig {
            clock: Clock::start(),
            interval: Duration::from_millis(20),
            max_samples: 100,
            gpu: None,
            host: false,
            probe: Some(Arc::new(FailsFirst {
                failures: 2,
                calls: Default::default(),
            })),
        };
        let mut sources = Sources::open(&config);
        for _ in 0..2 {
            assert_eq!(sources.sample(&config.clock).pool_in_use_bytes, None);
        }
        assert!(!sources.statuses()[0].available);
        assert_eq!(sources.sample(&config.clock).pool_in_use_bytes, Some(0));
        let status = &sources.statuses()[0];
        assert!(status.available, "{status:?}");
        assert_eq!(
            status.reason.as_deref(),
            Some("2 reads failed, the last: busy at read 1")
        );
    }
}
