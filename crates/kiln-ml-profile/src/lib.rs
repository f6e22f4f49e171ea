//! Where the time of a training run goes, in numbers.
//!
//! - [`PhaseTimer`]: an [`Observer`](kiln_ml_core::Observer) of the trainer's events that totals
//!   data wait, host-to-device, forward, backward, optimizer and the rest of each step, with
//!   device syncs at every phase ([`TimingMode::Accurate`]) or once per step with an accurate
//!   step every N ([`TimingMode::Cheap`]); a Lightning-style table, JSON and a Chrome trace.
//! - [`DeviceMonitor`]: a background thread sampling NVML (loaded at run time), Burn's
//!   memory-pool statistics and the host's CPU and RAM; "unavailable, because ..." where a
//!   source is missing.
//! - [`BatchSizeFinder`]: the largest batch that fits, in Lightning's `power` and `binsearch`
//!   modes and Accelerate's `shrink` mode, with out-of-memory recognised from errors, panics or
//!   a memory budget.
//! - [`Bottleneck`]: the cached-batch test against the real loader: input-bound,
//!   compute-bound or host-overhead-bound, with the evidence.
//! - [`Throughput`] and MFU against a [peak-FLOPs table](peak_flops) with its sources.
//! - [`LoaderTuner`], [`doctor()`], and a [`ProfileReport`] with an SVG timeline.
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
//! kiln-ml-profile depends on kiln-ml-core only (and on Burn's CubeCL runtime with the `wgpu` or
//! `cuda` feature, for the memory pool); the trainer and the loader meet it through events and
//! closures, so it profiles any training loop that emits kiln's events.

mod atomic_write;
mod clock;
mod error;
mod memory;
mod serde_seconds;
mod serde_seconds_option;

pub mod batch_size;
pub mod bottleneck;
pub mod doctor;
pub mod flops;
pub mod loader_tuner;
pub mod monitor;
pub mod peak_flops;
pub mod phase;
pub mod report;
pub mod throughput;

pub use batch_size::{
    BatchSizeFinder, ChildCommand, FinderMode, FinderReport, Trial, serve_child_trial,
};
pub use bottleneck::{Bottleneck, Diagnosis, StepRun, Thresholds, Verdict};
pub use clock::Clock;
pub use doctor::{DoctorOptions, SystemReport, doctor};
pub use error::{Error, Result};
pub use loader_tuner::{LoaderMeasurement, LoaderSetting, LoaderTuner, LoaderTuning};
pub use memory::{MemoryProbe, MemoryReading};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use monitor::CubePoolProbe;
pub use monitor::{
    DeviceMonitor, DeviceSample, HeapProbe, MonitorRecord, MonitorSummary, PeakAlloc, SourceStatus,
};
pub use peak_flops::{PeakFlops, PeakSource, Precision};
pub use phase::{Action, EpochBounds, PhaseReport, PhaseTimer, Span, TimingMode};
pub use report::{ProfileReport, write_timeline_svg};
pub use throughput::{Throughput, ThroughputMeter, ThroughputReport, ThroughputSample};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
