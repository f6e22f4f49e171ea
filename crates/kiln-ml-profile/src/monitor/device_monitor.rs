//! The handle of the monitor thread: start, look, stop.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use super::sample_log::SampleLog;
use super::sampler::{self, SamplerConfig};
use super::{DeviceSample, MonitorRecord, SourceStatus};
use crate::{Clock, Error, Result};

/// The name of the monitor's thread (as debuggers and `top -H` show it).
pub const MONITOR_THREAD_NAME: &str = "kiln-device-monitor";

/// A background thread sampling the GPU (NVML), a memory probe (Burn's pool, the heap) and
/// the host's CPU and RAM at a set interval, never on the training thread. A source that
/// cannot be read reports why in [`sources`](Self::sources); the others keep working.
///
/// ```
/// use std::time::Duration;
/// use kiln_ml_profile::{Clock, DeviceMonitor};
///
/// let monitor = DeviceMonitor::builder(Clock::start())
///     .interval(Duration::from_millis(50))
///     .start()?;
/// // ... train ...
/// let record = monitor.stop();
/// assert!(!record.samples.is_empty());
/// for source in &record.sources {
///     println!("{source}"); // "nvml: unavailable (libnvidia-ml.so.1: cannot open ...)"
/// }
/// # Ok::<(), kiln_ml_profile::Error>(())
/// ```
///
/// Dropping the monitor stops its thread too (and discards the samples).
pub struct DeviceMonitor {
    samples: Arc<Mutex<SampleLog>>,
    sources: Vec<SourceStatus>,
    clock: Clock,
    interval: Duration,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Vec<SourceStatus>>>,
}

impl DeviceMonitor {
    pub(crate) fn spawn(config: SamplerConfig) -> Result<Self> {
        let samples = Arc::new(Mutex::new(SampleLog::new(config.max_samples)));
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let (ready, started) = crossbeam_channel::bounded(1);
        let clock = config.clock;
        let interval = config.interval;
        let shared = Arc::clone(&samples);
        let thread = std::thread::Builder::new()
            .name(MONITOR_THREAD_NAME.to_owned())
            .spawn(move || sampler::run(config, shared, stopped, ready))
            .map_err(|error| Error::Run {
                during: "starting the device monitor thread".to_owned(),
                message: error.to_string(),
            })?;
        let sources = match started.recv() {
            Ok(sources) => sources,
            Err(_) => {
                let message = match thread.join() {
                    Err(panic) => kiln_ml_core::panic_message(panic.as_ref()),
                    Ok(_) => "it ended before its first sample".to_owned(),
                };
                return Err(Error::Run {
                    during: "starting the device monitor thread".to_owned(),
                    message,
                });
            }
        };
        Ok(Self {
            samples,
            sources,
            clock,
            interval,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Each source's state after the first sample.
    pub fn sources(&self) -> &[SourceStatus] {
        &self.sources
    }

    /// The clock the samples are stamped on (the one given to [`builder`](Self::builder)):
    /// hand it to recorders that should share the monitor's timeline.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The time between samples.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A copy of the samples kept so far, oldest first (a long run's are thinned: see
    /// [`kept_every`](Self::kept_every)).
    pub fn samples_so_far(&self) -> Vec<DeviceSample> {
        self.lock().samples().to_vec()
    }

    /// How many samples are kept (at most the builder's
    /// [`max_samples`](crate::DeviceMonitorBuilder::max_samples)).
    pub fn sample_count(&self) -> usize {
        self.lock().samples().len()
    }

    /// One sample in how many taken is kept: 1 until the run's samples first filled
    /// `max_samples`, then doubling each time they fill again, so the kept samples span the
    /// whole run at an even, coarser interval (`interval × kept_every`).
    pub fn kept_every(&self) -> u64 {
        self.lock().kept_every()
    }

    /// The newest kept sample.
    pub fn latest(&self) -> Option<DeviceSample> {
        self.lock().samples().last().cloned()
    }

    /// Stops the thread (waiting for a sample in progress) and returns everything it read,
    /// with each source's final state.
    pub fn stop(mut self) -> MonitorRecord {
        let sources = self.join().unwrap_or_else(|| self.sources.clone());
        let samples = self.lock().take();
        MonitorRecord { samples, sources }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SampleLog> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Signals the thread and waits for it; `None` if it had already been joined or panicked.
    fn join(&mut self) -> Option<Vec<SourceStatus>> {
        // Dropping the sender wakes the thread's wait with `Disconnected`.
        self.stop.take();
        match self.thread.take()?.join() {
            Ok(sources) => Some(sources),
            Err(panic) => {
                log::warn!(
                    "the device monitor thread panicked: {}",
                    kiln_ml_core::panic_message(panic.as_ref())
                );
                None
            }
        }
    }
}

impl Drop for DeviceMonitor {
    fn drop(&mut self) {
        self.join();
    }
}

impl std::fmt::Debug for DeviceMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMonitor")
            .field("interval", &self.interval)
            .field("sources", &self.sources)
            .field("samples", &self.sample_count())
            .field("running", &self.thread.is_some())
            .finish()
    }
}
