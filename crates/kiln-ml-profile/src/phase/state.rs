//! What the phase timer has seen: tallies, the open step, spans and epochs, and how each event
//! changes them.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use kiln_ml_core::{Event, Phase};

use super::tally::Tally;
use super::{Action, Span};

/// The tallies a step adds to: what the first step of a run is taken back out of.
#[derive(Debug, Default, Clone)]
pub(super) struct StepTallies {
    /// Every phase, every step.
    pub(super) all: BTreeMap<Action, Tally>,
    /// Phases of the steps in which every phase synced.
    pub(super) accurate: BTreeMap<Action, Tally>,
    /// Whole steps, and the steps in which every phase synced.
    pub(super) steps: Tally,
    pub(super) accurate_steps: Tally,
    /// `other` (a step's time outside its phases) of every step, and of the accurate steps.
    pub(super) other: Tally,
    pub(super) accurate_other: Tally,
    /// The data wait inside every step, and inside the accurate steps: measured on the host
    /// in every step, it is left out of the share the other phases are estimated from.
    pub(super) wait_in_steps: Duration,
    pub(super) accurate_wait_in_steps: Duration,
}

/// What the timer has seen so far.
#[derive(Debug, Default)]
pub(super) struct State {
    /// The steady steps' tallies (the first step of a run taken out once it is known).
    pub(super) tallies: StepTallies,
    /// The tallies as they were (empty) when the timer's first step began: restored when a
    /// `FirstStep` event names that step.
    pub(super) before_open: Option<(u64, StepTallies)>,
    /// The first step of the run: its number and its time from the run's start, less the
    /// validation and checkpoints in that time (which have rows of their own).
    pub(super) first_step: Option<(u64, Duration)>,
    /// Validation and checkpoints (start, duration) before the timer's first finished step: a
    /// run's first step, reported later, leaves those within its time out of its row.
    pub(super) between_steps_before_first: Vec<(Duration, Duration)>,
    pub(super) syncs: Tally,
    pub(super) current: Option<OpenStep>,
    /// The last `max_spans` spans.
    pub(super) spans: VecDeque<Span>,
    pub(super) dropped_spans: u64,
    pub(super) first_event: Option<Duration>,
    pub(super) last_event: Duration,
    pub(super) batches: u64,
    pub(super) samples: u64,
    pub(super) loader_batches: u64,
    pub(super) epochs: Vec<EpochBounds>,
}

/// The step whose phases are arriving.
#[derive(Debug)]
pub(super) struct OpenStep {
    pub(super) step: u64,
    pub(super) start: Duration,
    pub(super) phases: Vec<(Action, Duration)>,
    pub(super) all_synced: bool,
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

impl State {
    pub(super) fn push_span(&mut self, span: Span, max_spans: usize) {
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

    /// Remembers validation or a checkpoint that may fall inside a run's first step, reported
    /// later; only until the first step finishes, so that the list stays short.
    fn note_between_steps(&mut self, start: Duration, duration: Duration) {
        if self.first_step.is_none() && self.tallies.steps.calls == 0 {
            self.between_steps_before_first.push((start, duration));
        }
    }

    /// Closes the open step at its report: tallies the step, its phases and its `other`.
    pub(super) fn finish_step(&mut self, step: u64, now: Duration, max_spans: usize) {
        let Some(open) = self.current.take_if(|open| open.step == step) else {
            return;
        };
        let duration = now.saturating_sub(open.start);
        let phases: Duration = open.phases.iter().map(|(_, elapsed)| *elapsed).sum();
        let wait: Duration = open
            .phases
            .iter()
            .filter(|(action, _)| *action == Action::DataWait)
            .map(|(_, elapsed)| *elapsed)
            .sum();
        let tallies = &mut self.tallies;
        tallies.steps.add(duration);
        tallies.other.add(duration.saturating_sub(phases));
        tallies.wait_in_steps += wait;
        if open.all_synced {
            tallies.accurate_wait_in_steps += wait;
            tallies.accurate_steps.add(duration);
            tallies.accurate_other.add(duration.saturating_sub(phases));
            for (action, elapsed) in &open.phases {
                tallies.accurate.entry(*action).or_default().add(*elapsed);
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

    /// The run's first step ended `elapsed` after the run began: its phases leave the steady
    /// rows (restored to the tallies from before it opened) and it gets its own row and span.
    ///
    /// Only when this timer saw that step open with no step finished before it: otherwise its
    /// phases are already mixed into the steady rows (a hand-written loop before `fit`, or a
    /// timer reset mid-step), and a row of its own would count them twice.
    fn first_step(&mut self, step: u64, elapsed: Duration, now: Duration, max_spans: usize) {
        if self.first_step.is_some() {
            return;
        }
        let Some((_, before)) = self
            .before_open
            .take()
            .filter(|(opened, _)| *opened == step)
        else {
            return;
        };
        self.tallies = before;
        // The run began before the first event this timer saw (opening the data sends none):
        // the wall time starts with it, so the first step is never more than all of it.
        let run_start = now.saturating_sub(elapsed);
        if let Some(first) = &mut self.first_event {
            *first = (*first).min(run_start);
        }
        // A resumed run may validate and save before its first step: those keep their rows.
        let between: Duration = std::mem::take(&mut self.between_steps_before_first)
            .into_iter()
            .filter(|(start, _)| *start >= run_start)
            .map(|(_, duration)| duration)
            .sum();
        self.first_step = Some((step, elapsed.saturating_sub(between)));
        self.push_span(
            Span {
                action: Action::FirstStep,
                step,
                start: now.saturating_sub(elapsed),
                duration: elapsed,
                sync: None,
            },
            max_spans,
        );
    }

    /// Takes in one event, seen at `now` on the profile's clock.
    pub(super) fn apply(&mut self, event: &Event, now: Duration, max_spans: usize) {
        self.first_event.get_or_insert(now);
        self.last_event = now;
        match event {
            // The first phase of a step opens it (validation belongs to no step).
            Event::PhaseStart { phase, step }
                if *phase != Phase::Validation
                    && self.current.as_ref().is_none_or(|open| open.step != *step) =>
            {
                // The first step this timer sees may be reported as a run's first: remember the
                // tallies without it. Only then, so later steps pay nothing.
                if self.first_step.is_none() && self.tallies.steps.calls == 0 {
                    self.before_open = Some((*step, self.tallies.clone()));
                }
                self.current = Some(OpenStep {
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
                self.tallies.all.entry(action).or_default().add(*elapsed);
                if *phase == Phase::Validation {
                    self.note_between_steps(now.saturating_sub(*elapsed), *elapsed);
                }
                if let Some(sync) = sync {
                    self.syncs.add(*sync);
                }
                if *phase != Phase::Validation
                    && let Some(open) = self.current.as_mut().filter(|open| open.step == *step)
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
                self.push_span(span, max_spans);
            }
            Event::Step(report) => self.finish_step(report.step, now, max_spans),
            Event::FirstStep { step, elapsed } => self.first_step(*step, *elapsed, now, max_spans),
            Event::BatchReady { samples, .. } => {
                self.batches += 1;
                self.samples += samples;
            }
            Event::BatchLoaded { .. } => self.loader_batches += 1,
            // Saved between steps: a row of its own, outside every step's time.
            Event::CheckpointSaved { step, elapsed, .. } => {
                self.note_between_steps(now.saturating_sub(*elapsed), *elapsed);
                self.tallies
                    .all
                    .entry(Action::Checkpoint)
                    .or_default()
                    .add(*elapsed);
                let span = Span {
                    action: Action::Checkpoint,
                    step: *step,
                    start: now.saturating_sub(*elapsed),
                    duration: *elapsed,
                    sync: None,
                };
                self.push_span(span, max_spans);
            }
            // Validation runs between steps: the step whose data wait found the epoch's end
            // opens again after it, so its time does not count the validation.
            Event::PhaseStart {
                phase: Phase::Validation,
                ..
            } => self.current = None,
            Event::EpochStart { epoch } => self.epochs.push(EpochBounds {
                epoch: *epoch,
                start: now,
                end: None,
            }),
            Event::EpochEnd { epoch, .. } => {
                self.current = None;
                if let Some(bounds) = self
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
}
