//! The trainer's observers and phase timing.

use std::time::Instant;

use burn::tensor::backend::Backend;
use kiln_core::{Event, Observer, Phase};

use crate::{Error, Result};

/// The observers a trainer reports to, and the phase clock that times steps for them.
///
/// A phase's end includes a device sync (`B::sync`) only when an observer asks for accurate
/// timing or [`sync_phase_timing`](crate::TrainerConfig::sync_phase_timing) is set; otherwise
/// the timings measure how long the host took to enqueue the work, and no sync is added.
#[derive(Default)]
pub(crate) struct Observers {
    list: Vec<Box<dyn Observer>>,
    accurate: bool,
    force_sync: bool,
}

/// A started phase.
pub(crate) struct PhaseStarted {
    phase: Phase,
    step: u64,
    at: Option<Instant>,
}

impl Observers {
    pub(crate) fn new(force_sync: bool) -> Self {
        Self {
            list: Vec::new(),
            accurate: force_sync,
            force_sync,
        }
    }

    pub(crate) fn push(&mut self, observer: Box<dyn Observer>) {
        self.list.push(observer);
        self.accurate = self.force_sync || self.list.wants_accurate_timing();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn emit(&self, event: &Event) {
        self.list.on_event(event);
    }

    /// Starts timing a phase of optimizer step `step`.
    pub(crate) fn start(&self, phase: Phase, step: u64) -> PhaseStarted {
        if self.list.is_empty() && !self.force_sync {
            return PhaseStarted {
                phase,
                step,
                at: None,
            };
        }
        self.emit(&Event::PhaseStart { phase, step });
        PhaseStarted {
            phase,
            step,
            at: Some(Instant::now()),
        }
    }

    /// Ends a phase: syncs the device when accurate timing is wanted, then reports it.
    pub(crate) fn end<B: Backend>(&self, started: PhaseStarted, device: &B::Device) -> Result<()> {
        let Some(at) = started.at else {
            return Ok(());
        };
        if self.accurate {
            B::sync(device).map_err(|error| Error::Device {
                during: "the phase-timing device sync",
                message: format!("{error:?}"),
            })?;
        }
        let elapsed = at.elapsed();
        self.emit(&Event::PhaseEnd {
            phase: started.phase,
            step: started.step,
            elapsed,
        });
        Ok(())
    }
}
