//! `PhaseTimer`: an observer that totals where each step's time goes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use kiln_core::{Event, Observer, Phase, Timing};

use super::report::{PhaseReport, PhaseRow};
use super::tally::Tally;
use super::{Action, Span, TimingMode};
use crate::Clock;

/// Spans kept for traces and pictures by default; the tallies keep counting past it.
const DEFAULT_MAX_SPANS: usize = 200_000;

/// Times the trainer's phases: an [`Observer`] of kiln's training events.
///
/// Attach it to the trainer (`trainer.add_observer(timer.clone())` with an `Arc`); read
/// [`report`](Self::report) for a table like Lightning's `SimpleProfiler`, and
/// [`spans`](Self::spans) for a Chrome trace or the SVG timeline. Each phase is tallied from
/// the trainer's `PhaseEnd` events; the rest of a step (the trainer's bookkeeping, other
/// observers, checkpoints) is reported as `other`.
///
/// What the numbers mean depends on the [`TimingMode`]: with `Accurate` every phase ends with
/// a device sync; with `Cheap` only one step in N does, every step's end syncs, and the split of
/// the step into phases is estimated from the accurate steps (marked as estimated in the
/// report). A phase whose `PhaseEnd` carries a sync is known to be accurate whoever asked for
/// it, so another observer asking for more syncs only makes the report more exact.
///
/// ```
/// use std::time::Duration;
/// use kiln_core::{Event, Observer, Phase};
/// use kiln_profile::{Clock, PhaseTimer, TimingMode};
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

/// What the timer has seen so far.
#[derive(Debug, Default)]
struct State {
    /// Every phase, every step.
    all: BTreeMap<Action, Tally>,
    /// Phases of the steps in which every phase synced.
    accurate: BTreeMap<Action, Tally>,
    /// Whole steps, and the steps in which every phase synced.
    steps: Tally,
    accurate_steps: Tally,
    /// `other` (a step's time outside its phases) of every step, and of the accurate steps.
    other: Tally,
    accurate_other: Tally,
    syncs: Tally,
    /// The data wait inside every step, and inside the accurate steps: measured on the host
    /// in every step, it is left out of the share the other phases are estimated from.
    wait_in_steps: Duration,
    accurate_wait_in_steps: Duration,
    current: Option<OpenStep>,
    /// The last `max_spans` spans.
    spans: VecDeque<Span>,
    dropped_spans: u64,
    first_event: Option<Duration>,
    last_event: Duration,
    batches: u64,
    samples: u64,
    loader_batches: u64,
    epochs: Vec<EpochBounds>,
}

/// The step whose phases are arriving.
#[derive(Debug)]
struct OpenStep {
    step: u64,
    start: Duration,
    phases: Vec<(Action, Duration)>,
    all_synced: bool,
}

/// When an epoch started and ended on the profile's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EpochBounds {
    /// The epoch, counted from zero.
    pub epoch: u64,
    /// Its `EpochStart`.
    #[serde(with = "crate::serde_seconds")]
    pub start: Duration,
    /// Its `EpochEnd`; `None` while it runs.
    #[serde(with = "crate::serde_seconds_option")]
    pub end: Option<Duration>,
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
        let wall = state.first_event.map_or(Duration::ZERO, |first| {
            state.last_event.saturating_sub(first)
        });
        let estimated = !matches!(self.mode, TimingMode::Accurate | TimingMode::Host)
            && state.accurate_steps.calls < state.steps.calls;
        let mut rows = Vec::new();
        for action in Action::ALL {
            let row = match action {
                Action::Step => Some(row_from(action, &state.steps, false)),
                Action::Other => other_row(&state, estimated),
                Action::DataWait | Action::Validation => state
                    .all
                    .get(&action)
                    .map(|all| row_from(action, all, false)),
                _ => phase_row(&state, action, estimated),
            };
            rows.extend(row);
        }
        for row in &mut rows {
            row.percent = percent(row.total_seconds, wall.as_secs_f64());
        }
        PhaseReport {
            title: "Training Profiler Report".to_owned(),
            mode: self.mode,
            wall_seconds: wall.as_secs_f64(),
            steps: state.steps.calls,
            accurate_steps: state.accurate_steps.calls,
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

/// A row straight from a tally.
fn row_from(action: Action, tally: &Tally, estimated: bool) -> PhaseRow {
    PhaseRow {
        action,
        calls: tally.calls,
        mean_seconds: tally.mean().as_secs_f64(),
        total_seconds: tally.total.as_secs_f64(),
        percent: 0.0,
        estimated,
    }
}

/// A phase's row: measured when every step was accurate; otherwise the accurate steps' share of
/// their time outside the data wait, applied to the same time of all steps (measured exactly,
/// since every step ends with a sync). Before any accurate step, the host's times, marked
/// estimated.
fn phase_row(state: &State, action: Action, estimated: bool) -> Option<PhaseRow> {
    let all = state.all.get(&action)?;
    if !estimated {
        return Some(row_from(action, all, false));
    }
    if state.accurate_steps.calls == 0 {
        return Some(row_from(action, all, true));
    }
    let accurate = state
        .accurate
        .get(&action)
        .map_or(Duration::ZERO, |tally| tally.total);
    Some(estimated_row(state, action, accurate, all.calls))
}

/// The rest of the steps, estimated like a phase when not every step was accurate.
fn other_row(state: &State, estimated: bool) -> Option<PhaseRow> {
    if state.steps.calls == 0 {
        return None;
    }
    if !estimated || state.accurate_steps.calls == 0 {
        let mut row = row_from(Action::Other, &state.other, estimated);
        row.calls = state.steps.calls;
        return Some(row);
    }
    Some(estimated_row(
        state,
        Action::Other,
        state.accurate_other.total,
        state.steps.calls,
    ))
}

/// `accurate_total` scaled from the accurate steps' device time to all steps' device time
/// (each without its data wait).
fn estimated_row(state: &State, action: Action, accurate_total: Duration, calls: u64) -> PhaseRow {
    let accurate_work = state
        .accurate_steps
        .total
        .saturating_sub(state.accurate_wait_in_steps);
    let all_work = state.steps.total.saturating_sub(state.wait_in_steps);
    let total = all_work.as_secs_f64() * ratio(accurate_total, accurate_work);
    PhaseRow {
        action,
        calls,
        mean_seconds: if calls == 0 {
            0.0
        } else {
            total / calls as f64
        },
        total_seconds: total,
        percent: 0.0,
        estimated: true,
    }
}

fn ratio(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        part.as_secs_f64() / whole.as_secs_f64()
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

impl State {
    fn push_span(&mut self, span: Span, max_spans: usize) {
        if max_spans == 0 {
            self.dropped_spans += 1;
            return;
        }
        if self.spans.len() == max_spans {
            self.spans.pop_front();
            self.dropped_spans += 1;
        }
        self.spans.push_back(span);
    }

    /// Closes the open step at its report: tallies the step, its phases and its `other`.
    fn finish_step(&mut self, step: u64, now: Duration, max_spans: usize) {
        let Some(open) = self.current.take_if(|open| open.step == step) else {
            return;
        };
        let duration = now.saturating_sub(open.start);
        self.steps.add(duration);
        let phases: Duration = open.phases.iter().map(|(_, elapsed)| *elapsed).sum();
        let wait: Duration = open
            .phases
            .iter()
            .filter(|(action, _)| *action == Action::DataWait)
            .map(|(_, elapsed)| *elapsed)
            .sum();
        self.other.add(duration.saturating_sub(phases));
        self.wait_in_steps += wait;
        if open.all_synced {
            self.accurate_wait_in_steps += wait;
            self.accurate_steps.add(duration);
            self.accurate_other.add(duration.saturating_sub(phases));
            for (action, elapsed) in &open.phases {
                self.accurate.entry(*action).or_default().add(*elapsed);
            }
        }
        self.push_span(
            Span {
                action: Action::Step,
                step,
                start: open.start,
                duration,
                sync: None,
            },
            max_spans,
        );
    }
}

impl Observer for PhaseTimer {
    fn on_event(&self, event: &Event) {
        let now = self.clock.now();
        let mut state = self.lock();
        state.first_event.get_or_insert(now);
        state.last_event = now;
        match event {
            // The first phase of a step opens it (validation belongs to no step).
            Event::PhaseStart { phase, step }
                if *phase != Phase::Validation
                    && state.current.as_ref().is_none_or(|open| open.step != *step) =>
            {
                state.current = Some(OpenStep {
                    step: *step,
                    start: now,
                    phases: Vec::new(),
                    all_synced: true,
                });
            }
            Event::PhaseEnd {
                phase,
                step,
                elapsed,
                sync,
            } => {
                let action = Action::from(*phase);
                state.all.entry(action).or_default().add(*elapsed);
                if let Some(sync) = sync {
                    state.syncs.add(*sync);
                }
                if *phase != Phase::Validation
                    && let Some(open) = state.current.as_mut().filter(|open| open.step == *step)
                {
                    open.phases.push((action, *elapsed));
                    // The data wait is the host's own wait: it needs no sync to be right.
                    open.all_synced &= sync.is_some() || *phase == Phase::DataWait;
                }
                let span = Span {
                    action,
                    step: *step,
                    start: now.saturating_sub(*elapsed),
                    duration: *elapsed,
                    sync: *sync,
                };
                state.push_span(span, self.max_spans);
            }
            Event::Step(report) => state.finish_step(report.step, now, self.max_spans),
            Event::BatchReady { samples, .. } => {
                state.batches += 1;
                state.samples += samples;
            }
            Event::BatchLoaded { .. } => state.loader_batches += 1,
            // Validation runs between steps: the step whose data wait found the epoch's end
            // opens again after it, so its time does not count the validation.
            Event::PhaseStart {
                phase: Phase::Validation,
                ..
            } => state.current = None,
            Event::EpochStart { epoch } => state.epochs.push(EpochBounds {
                epoch: *epoch,
                start: now,
                end: None,
            }),
            Event::EpochEnd { epoch, .. } => {
                state.current = None;
                if let Some(bounds) = state
                    .epochs
                    .iter_mut()
                    .rev()
                    .find(|bounds| bounds.epoch == *epoch && bounds.end.is_none())
                {
                    bounds.end = Some(now);
                }
            }
            _ => {}
        }
    }

    fn timing(&self, step: u64) -> Timing {
        self.mode.timing(step)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_core::{Event, Observer, Phase, StepOutcome, StepReport};

    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    /// Feeds one step's phases with the given elapsed times, synced or not, then its report.
    fn run_step(timer: &PhaseTimer, step: u64, phases: &[(Phase, u64)], synced: bool) {
        for &(phase, elapsed) in phases {
            timer.on_event(&Event::PhaseStart { phase, step });
            std::thread::sleep(ms(elapsed));
            timer.on_event(&Event::PhaseEnd {
                phase,
                step,
                elapsed: ms(elapsed),
                sync: synced.then(|| Duration::from_micros(10)),
            });
        }
        timer.on_event(&Event::Step(StepReport {
            step,
            outcome: StepOutcome::Applied,
            loss: None,
            loss_scale: None,
            grad_norm: None,
            learning_rate: 0.1,
        }));
    }

    const PHASES: [(Phase, u64); 4] = [
        (Phase::DataWait, 1),
        (Phase::Forward, 2),
        (Phase::Backward, 4),
        (Phase::Optimizer, 1),
    ];

    #[test]
    fn accurate_mode_tallies_every_phase_and_the_rest_of_the_step() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
        for step in 1..=3 {
            run_step(&timer, step, &PHASES, true);
        }
        let report = timer.report();
        assert_eq!(report.steps, 3);
        assert_eq!(report.accurate_steps, 3);
        let backward = report.row("backward").unwrap();
        assert_eq!(backward.calls, 3);
        assert!((backward.total_seconds - 0.012).abs() < 1e-9);
        assert!(!backward.estimated);
        assert_eq!(report.sync_calls, 12);
        // Steps take at least their phases; `other` is what is left and never negative.
        let step = report.row("step").unwrap();
        assert!(step.total_seconds >= 0.024);
        let other = report.row("other").unwrap();
        assert!((step.total_seconds - 0.024 - other.total_seconds).abs() < 1e-6);
        let table = report.table();
        assert!(table.contains("| Action"), "{table}");
        assert!(table.contains("backward"), "{table}");
        assert!(!table.contains('~'), "{table}");
    }

    #[test]
    fn cheap_mode_estimates_the_split_from_accurate_steps() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Cheap { every: 2 });
        assert_eq!(timer.timing(1), Timing::Step);
        assert_eq!(timer.timing(2), Timing::Phases);
        run_step(&timer, 1, &PHASES, false);
        run_step(&timer, 2, &PHASES, true);
        let report = timer.report();
        assert_eq!((report.steps, report.accurate_steps), (2, 1));
        let forward = report.row("forward").unwrap();
        assert!(forward.estimated);
        assert_eq!(forward.calls, 2);
        // The data wait is the host's own: measured on every step, never estimated.
        let wait = report.row("data_wait").unwrap();
        assert!(!wait.estimated);
        assert!((wait.total_seconds - 0.002).abs() < 1e-9);
        // The estimated phases and `other` add up to the measured steps' total.
        let estimated: f64 = report
            .rows
            .iter()
            .filter(|row| row.estimated)
            .map(|row| row.total_seconds)
            .sum();
        // They split the measured steps' total less the data wait's share (here 1 ms of 8).
        let step = report.row("step").unwrap().total_seconds;
        assert!(estimated <= step + 1e-9, "{estimated} > {step}");
        assert!(estimated > 0.25 * step, "{estimated} vs {step}");
        assert!(report.table().contains("forward~"));
    }

    #[test]
    fn batches_are_counted_once_per_source() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Host);
        let ready = Event::BatchReady {
            epoch: 0,
            batch: 0,
            samples: 8,
            wait: ms(1),
        };
        let loaded = Event::BatchLoaded {
            epoch: 0,
            batch: 0,
            samples: 8,
            wait: ms(1),
        };
        timer.on_event(&loaded);
        timer.on_event(&ready);
        let report = timer.report();
        assert_eq!(
            (report.batches, report.samples, report.loader_batches),
            (1, 8, 1)
        );
    }

    #[test]
    fn only_the_last_spans_are_kept_but_tallies_go_on() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate).with_max_spans(3);
        run_step(&timer, 1, &PHASES, true);
        let actions: Vec<Action> = timer.spans().iter().map(|span| span.action).collect();
        assert_eq!(actions, [Action::Backward, Action::Optimizer, Action::Step]);
        let report = timer.report();
        assert_eq!(report.spans_dropped, 2);
        assert_eq!(report.row("optimizer").unwrap().calls, 1);
    }

    #[test]
    fn cheap_rows_add_up_to_the_measured_steps() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Cheap { every: 2 });
        // A step with a long data wait and a quick one: the wait is measured on every step and
        // kept out of the share the other phases are estimated from.
        run_step(
            &timer,
            1,
            &[
                (Phase::DataWait, 9),
                (Phase::Forward, 1),
                (Phase::Optimizer, 1),
            ],
            false,
        );
        run_step(
            &timer,
            2,
            &[
                (Phase::DataWait, 1),
                (Phase::Forward, 2),
                (Phase::Optimizer, 2),
            ],
            true,
        );
        let report = timer.report();
        let rows: f64 = report
            .rows
            .iter()
            .filter(|row| row.action != Action::Step)
            .map(|row| row.total_seconds)
            .sum();
        let steps = report.row("step").unwrap().total_seconds;
        assert!((rows - steps).abs() < 1e-6, "{rows} vs {steps}");
        assert!((report.row("data_wait").unwrap().total_seconds - 0.010).abs() < 1e-9);
    }

    #[test]
    fn before_any_accurate_step_cheap_rows_are_host_times() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Cheap { every: 50 });
        run_step(&timer, 1, &PHASES, false);
        let report = timer.report();
        let forward = report.row("forward").unwrap();
        assert!(forward.estimated);
        assert!((forward.total_seconds - 0.002).abs() < 1e-9);
        assert!(report.table().contains("host enqueue times"));
    }

    #[test]
    fn validation_and_an_unfinished_step_are_not_steps() {
        let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
        timer.on_event(&Event::EpochStart { epoch: 0 });
        run_step(&timer, 1, &PHASES, true);
        timer.on_event(&Event::PhaseStart {
            phase: Phase::Validation,
            step: 1,
        });
        timer.on_event(&Event::PhaseEnd {
            phase: Phase::Validation,
            step: 1,
            elapsed: ms(3),
            sync: Some(ms(0)),
        });
        // The data wait that found the epoch's end opens step 2, which never reports.
        timer.on_event(&Event::PhaseStart {
            phase: Phase::DataWait,
            step: 2,
        });
        timer.on_event(&Event::PhaseEnd {
            phase: Phase::DataWait,
            step: 2,
            elapsed: ms(1),
            sync: None,
        });
        timer.on_event(&Event::EpochEnd {
            epoch: 0,
            steps: 1,
            samples: 8,
        });
        let report = timer.report();
        assert_eq!(report.steps, 1);
        assert_eq!(report.row("validation").unwrap().calls, 1);
        assert_eq!(report.row("data_wait").unwrap().calls, 2);
        let epochs = timer.epochs();
        assert_eq!(epochs.len(), 1);
        assert!(epochs[0].end.is_some());
    }
}
