//! `PhaseTimer`: an observer that totals where each step's time goes.

use std::sync::Mutex;

use kiln_ml_core::{Event, Observer, Timing};

use super::report::PhaseReport;
use super::rows::rows;
use super::state::{EpochBounds, State};
use super::{Span, TimingMode};
use crate::Clock;

/// Spans kept for traces and pictures by default; the tallies keep counting past it.
const DEFAULT_MAX_SPANS: usize = 200_000;

/// Times the trainer's phases: an [`Observer`] of kiln's training events.
///
/// Attach it to the trainer (`trainer.add_observer(timer.clone())` with an `Arc`); read
/// [`report`](Self::report) for a table like Lightning's `SimpleProfiler`, and
/// [`spans`](Self::spans) for a Chrome trace or the SVG timeline. Each phase is tallied from
/// the trainer's `PhaseEnd` events; the rest of a step (the trainer's bookkeeping, other
/// observers) is reported as `other`, and checkpoints, saved between steps, as `checkpoint`
/// (from the trainer's `CheckpointSaved`).
///
/// What the numbers mean depends on the [`TimingMode`]: with `Accurate` every phase ends with
/// a device sync; with `Cheap` only one step in N does, the step before it syncs once at its
/// end, the steps between not at all, and the split of the steps into phases is estimated from
/// the accurate steps (marked as estimated in the report). A phase whose `PhaseEnd` carries a sync is known to be accurate whoever asked for
/// it, so another observer asking for more syncs only makes the report more exact.
///
/// ```
/// use std::time::Duration;
/// use kiln_ml_core::{Event, Observer, Phase};
/// use kiln_ml_profile::{Clock, PhaseTimer, TimingMode};
///
/// let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
/// timer.on_event(&Event::PhaseStart { phase: Phase::Forward, step: 1 });
/// timer.on_event(&Event::PhaseEnd {
///     phase: Phase::Forward,
///     step: 1,
///     elapsed: Duration::from_millis(3),
///     sync: Some(Duration::from_millis(1)),
/// });
/// let report = timer.report();
/// assert_eq!(report.row("forward").unwrap().calls, 1);
/// ```
#[derive(Debug)]
pub struct PhaseTimer {
    clock: Clock,
    mode: TimingMode,
    max_spans: usize,
    state: Mutex<State>,
}

impl PhaseTimer {
    /// A timer on `clock`'s timeline that asks for the syncs of `mode`.
    pub fn new(clock: Clock, mode: TimingMode) -> Self {
        Self {
            clock,
            mode,
            max_spans: DEFAULT_MAX_SPANS,
            state: Mutex::default(),
        }
    }

    /// Keeps only the last `max_spans` spans for traces and pictures (the tallies are
    /// unaffected).
    pub fn with_max_spans(mut self, max_spans: usize) -> Self {
        self.max_spans = max_spans;
        self
    }

    /// The timing mode.
    pub fn mode(&self) -> TimingMode {
        self.mode
    }

    /// The clock the spans are placed on.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The spans recorded so far (phases and whole steps; the last
    /// [`with_max_spans`](Self::with_max_spans) of them), in the order they ended.
    pub fn spans(&self) -> Vec<Span> {
        self.lock().spans.iter().copied().collect()
    }

    /// Epoch starts and ends seen so far.
    pub fn epochs(&self) -> Vec<EpochBounds> {
        self.lock().epochs.clone()
    }

    /// Forgets everything seen so far (after a warm-up, say).
    pub fn reset(&self) {
        *self.lock() = State::default();
    }

    /// The table of where the time went so far.
    pub fn report(&self) -> PhaseReport {
        let state = self.lock();
        let (rows, wall) = rows(&state, self.mode);
        PhaseReport {
            title: "Training Profiler Report".to_owned(),
            mode: self.mode,
            wall_seconds: wall.as_secs_f64(),
            steps: state.tallies.steps.calls,
            accurate_steps: state.tallies.accurate_steps.calls,
            batches: state.batches,
            samples: state.samples,
            loader_batches: state.loader_batches,
            sync_calls: state.syncs.calls,
            sync_seconds: state.syncs.total.as_secs_f64(),
            rows,
            spans_dropped: state.dropped_spans,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panicking observer elsewhere must not take the profile down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Observer for PhaseTimer {
    fn on_event(&self, event: &Event) {
        let now = self.clock.now();
        self.lock().apply(event, now, self.max_spans);
    }

    fn timing(&self, step: u64) -> Timing {
        self.mode.timing(step)
    }
}

#[cfg(test)]
mod tests;
