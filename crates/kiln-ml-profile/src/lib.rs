//! Where the time of a training run goes, in numbers.
//!
//! - [`PhaseTimer`]: an [`Observer`](kiln_ml_core::Observer) of the trainer's events that totals
//!   data wait, host-to-device, forward, backward, optimizer and the rest of each step, with
//!   device syncs at every phase ([`TimingMode::Accurate`]) or only in an accurate step every N
//!   and at the end of the step before it ([`TimingMode::Cheap`]); a Lightning-style table,
//!   JSON and a Chrome trace.
//! - [`DeviceMonitor`]: a background thread sampling NVML (loaded at run time), Burn's
//!   memory-pool statistics and the host's CPU and RAM; "unavailable, because ..." where a
//!   source is missing.
//! - [`BatchSizeFinder`]: the largest batch that fits, in Lightning's `power` and `binsearch`
//!   modes and Accelerate's `shrink` mode, with out-of-memory recognised from errors, panics or
//!   a memory budget.
//! - [`Bottleneck`]: the cached-batch test against the real loader: input-bound,
//!   compute-bound or host-overhead-bound, with the evidence.
//! - [`Throughput`] and MFU against a [peak-FLOPs table](peak_flops) with its sources.
//! - [`LoaderTuner`], [`doctor()`], and a [`ProfileReport`], with an SVG timeline under the
//!   `svg` feature.
//!
//! Every name is at the crate root, except the FLOP-counting functions of [`flops`] and the
//! peak table of [`peak_flops`].
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use kiln_ml_core::{Event, Observer, Phase, StepOutcome, StepReport};
//! use kiln_ml_profile::{Clock, PhaseTimer, TimingMode};
//!
//! // Attach `timer` to a trainer (`trainer.add_observer(timer.clone())`); here the trainer's
//! // events of one step are played by hand.
//! let timer = Arc::new(PhaseTimer::new(Clock::start(), TimingMode::Accurate));
//! for (phase, ms) in [(Phase::DataWait, 2), (Phase::Forward, 5), (Phase::Backward, 9), (Phase::Optimizer, 1)] {
//!     timer.on_event(&Event::PhaseStart { phase, step: 1 });
//!     let elapsed = Duration::from_millis(ms);
//!     timer.on_event(&Event::PhaseEnd { phase, step: 1, elapsed, sync: Some(Duration::ZERO) });
//! }
//! timer.on_event(&Event::Step(StepReport {
//!     step: 1, outcome: StepOutcome::Applied, loss: Some(0.7), loss_scale: None,
//!     grad_norm: None, learning_rate: 1e-3,
//! }));
//! let report = timer.report();
//! assert_eq!(report.steps, 1);
//! assert_eq!(report.row("backward").unwrap().calls, 1);
//! println!("{}", report.table()); // Action | Mean duration (s) | Num calls | Total time (s) | Percentage %
//! ```
//!
//! kiln-ml-profile depends on kiln-ml-core and kiln-ml-device (the doctor's Vulkan adapters)
//! only (and on Burn's CubeCL runtime with the `wgpu` or `cuda` feature, for the memory pool);
//! the trainer and the loader meet it through events and
//! closures, so it profiles any training loop that emits kiln's events.

mod batch_size;
mod bottleneck;
mod clock;
mod doctor;
mod error;
mod loader_tuner;
mod memory;
mod monitor;
mod phase;
mod report;
mod serde_losses;
mod serde_seconds;
mod serde_seconds_option;
mod throughput;

// Two namespaces of free functions and tables, reached only through their module.
pub mod flops;
pub mod peak_flops;

pub use batch_size::{
    BatchSizeFinder, ChildCommand, FinderMode, FinderReport, RESULT_PREFIX, TRIAL_ENV, Trial,
    is_out_of_memory, serve_child_trial,
};
pub use bottleneck::{
    Bottleneck, Diagnosis, RunMeasurement, StepRun, Thresholds, Verdict, decide_bottleneck,
};
pub use clock::Clock;
pub use doctor::{
    BatchAdvice, CpuSummary, DoctorOptions, RamSummary, Recommendation, Recommendations,
    SystemReport, doctor,
};
pub use error::{Error, Result};
pub use loader_tuner::{
    LoaderMeasurement, LoaderSetting, LoaderTuner, LoaderTuning, best_loader_setting,
};
pub use memory::{MemoryProbe, MemoryReading};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use monitor::CubePoolProbe;
pub use monitor::{
    DeviceMonitor, DeviceMonitorBuilder, DeviceSample, GpuInfo, HeapProbe, MONITOR_THREAD_NAME,
    MonitorRecord, MonitorStats, MonitorSummary, PeakAlloc, SourceStatus, device_memory_probe,
    nvml_gpus, summaries_by_epoch, summaries_by_phase, summarize_samples,
};
pub use phase::{
    Action, EpochBounds, PhaseReport, PhaseRow, PhaseTimer, Span, TimingMode, chrome_trace,
    write_chrome_trace,
};
pub use report::ProfileReport;
#[cfg(feature = "svg")]
pub use report::write_timeline_svg;
pub use throughput::{Throughput, ThroughputMeter, ThroughputReport, ThroughputSample};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
