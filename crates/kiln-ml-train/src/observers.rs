//! The trainer's observers and phase timing.

use std::time::Instant;

use burn::tensor::backend::Backend;
use kiln_ml_core::{Event, Observer, Phase, Timing};

use crate::first_step::FirstStepWatch;
use crate::{Error, Result};

/// The observers a trainer reports to, and the phase clock that times steps for them.
///
/// How much a phase's end syncs the device (`B::sync`) is what the most demanding observer's
/// [`Observer::timing`] asks for that step, or [`Timing::Phases`] when
/// [`sync_phase_timing`](crate::TrainerConfig::sync_phase_timing) is set. With
/// [`Timing::Host`] the timings measure how long the host took to enqueue the work, and no sync
/// is added; with [`Timing::Step`] only the optimizer phase syncs, once per step. A timed
/// validation pass waits for the device before it starts (so steps still queued are not counted
/// as validation) and syncs at its end: twice per pass, and its metric's readback would wait as
/// long.
#[derive(Default)]
pub(crate) struct Observers {
    list: Vec<Box<dyn Observer>>,
    force_sync: bool,
    /// Set while a `fit` waits for its first optimizer step: told every phase entered.
    first_step: Option<FirstStepWatch>,
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
            force_sync,
            first_step: None,
        }
    }

    pub(crate) fn push(&mut self, observer: Box<dyn Observer>) {
        self.list.push(observer);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn emit(&self, event: &Event) {
        self.list.on_event(event);
    }

    /// Watches the first optimizer step from now on (replacing any earlier watch).
    pub(crate) fn watch_first_step(&mut self, watch: FirstStepWatch) {
        self.first_step = Some(watch);
    }

    /// Ends the first-step watch, if one runs.
    pub(crate) fn take_first_step(&mut self) -> Option<FirstStepWatch> {
        self.first_step.take()
    }

    /// Starts timing a phase of optimizer step `step`.
    pub(crate) fn start(&self, phase: Phase, step: u64) -> PhaseStarted {
        if let Some(watch) = &self.first_step {
            watch.enter(phase);
        }
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

    /// Starts timing a phase that must not count work queued before it (a validation pass after
    /// steps that did not sync): when the phase is timed, waits for the device first.
    pub(crate) fn start_drained<B: Backend>(
        &self,
        phase: Phase,
        step: u64,
        device: &B::Device,
    ) -> Result<PhaseStarted> {
        if !self.list.is_empty() || self.force_sync {
            sync::<B>(device, "the device sync before a timed phase")?;
        }
        Ok(self.start(phase, step))
    }

    /// Whether the end of `phase` in step `step` syncs the device.
    fn syncs(&self, phase: Phase, step: u64) -> bool {
        // A validation pass is its own unit of device work, timed whole.
        if self.force_sync || phase == Phase::Validation {
            return true;
        }
        match self.list.timing(step) {
            Timing::Host => false,
            Timing::Step => phase == Phase::Optimizer,
            Timing::Phases => true,
        }
    }

    /// Ends a phase: syncs the device when the observers' timing asks for it, then reports it.
    pub(crate) fn end<B: Backend>(&self, started: PhaseStarted, device: &B::Device) -> Result<()> {
        let Some(at) = started.at else {
            return Ok(());
        };
        let sync = if self.syncs(started.phase, started.step) {
            let sync_started = Instant::now();
            sync::<B>(device, "the phase-timing device sync")?;
            Some(sync_started.elapsed())
        } else {
            None
        };
        let elapsed = at.elapsed();
        self.emit(&Event::PhaseEnd {
            phase: started.phase,
            step: started.step,
            elapsed,
            sync,
        });
        Ok(())
    }
}

/// Waits for `device`'s queued work, naming what the wait was for when it fails.
pub(crate) fn sync<B: Backend>(device: &B::Device, during: &'static str) -> Result<()> {
    B::sync(device).map_err(|error| Error::Device {
        during,
        message: format!("{error:?}"),
    })
}
