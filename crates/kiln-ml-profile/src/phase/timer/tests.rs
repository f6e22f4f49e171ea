//! The phase timer on scripted events.

use std::time::Duration;

use kiln_ml_core::{Event, Observer, Phase, StepReport};

use super::*;
use crate::phase::Action;

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
    timer.on_event(&Event::Step(StepReport::applied(step, 0.1)));
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
fn checkpoints_between_steps_have_a_row_of_their_own() {
    let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
    run_step(&timer, 1, &PHASES, true);
    // The trainer saves after the step's report and says how long it took.
    std::thread::sleep(ms(30));
    timer.on_event(&Event::CheckpointSaved {
        path: "run.ckpt".into(),
        step: 1,
        elapsed: ms(30),
    });
    run_step(&timer, 2, &PHASES, true);
    let report = timer.report();
    let checkpoint = report.row("checkpoint").expect("a checkpoint row");
    assert_eq!(checkpoint.calls, 1);
    assert!((checkpoint.total_seconds - 0.030).abs() < 1e-9);
    // Not counted in the steps either side of it.
    let step = report.row("step").unwrap();
    assert!(step.total_seconds < report.wall_seconds - 0.029, "{step:?}");
    assert!(report.table().contains("checkpoint"));
    let spans = timer.spans();
    assert!(
        spans
            .iter()
            .any(|span| span.action == Action::Checkpoint && span.step == 1)
    );
}

/// The shares of the wall time of every row but `step` (which covers the phases).
fn shares(report: &crate::phase::PhaseReport) -> f64 {
    report
        .rows
        .iter()
        .filter(|row| row.action != Action::Step)
        .map(|row| row.percent)
        .sum()
}

#[test]
fn validation_and_a_checkpoint_before_the_first_step_keep_their_rows_only() {
    // A run resumed at an epoch's end validates and saves before its first step: those are
    // in the first step's time from the start of `fit`, and have rows of their own.
    let clock = Clock::start();
    let timer = PhaseTimer::new(clock, TimingMode::Accurate);
    timer.on_event(&Event::PhaseStart {
        phase: Phase::Validation,
        step: 4,
    });
    std::thread::sleep(ms(30));
    timer.on_event(&Event::PhaseEnd {
        phase: Phase::Validation,
        step: 4,
        elapsed: ms(30),
        sync: Some(Duration::ZERO),
    });
    std::thread::sleep(ms(10));
    timer.on_event(&Event::CheckpointSaved {
        path: "c".into(),
        step: 4,
        elapsed: ms(10),
    });
    run_step(&timer, 5, &PHASES, true);
    let elapsed = clock.now();
    timer.on_event(&Event::FirstStep { step: 5, elapsed });
    run_step(&timer, 6, &PHASES, true);
    let report = timer.report();
    let first = report.row("first_step").unwrap().total_seconds;
    let expected = (elapsed - ms(40)).as_secs_f64();
    assert!(
        (first - expected).abs() < 1e-9,
        "{first} against {expected}"
    );
    assert_eq!(report.row("validation").unwrap().calls, 1);
    assert_eq!(report.row("checkpoint").unwrap().calls, 1);
    assert!(shares(&report) <= 100.0 + 1e-6, "{}", report.table());
}

#[test]
fn a_first_step_after_steps_already_tallied_gets_no_row() {
    // A hand-written loop ran step 1 on this timer; `fit` then reports step 2 as its first.
    // Step 2's phases are in the steady rows already: a row of its own would count them twice.
    let clock = Clock::start();
    let timer = PhaseTimer::new(clock, TimingMode::Accurate);
    run_step(&timer, 1, &PHASES, true);
    let fit_start = clock.now();
    run_step(&timer, 2, &PHASES, true);
    timer.on_event(&Event::FirstStep {
        step: 2,
        elapsed: clock.now() - fit_start,
    });
    let report = timer.report();
    assert!(report.row("first_step").is_none(), "{}", report.table());
    assert_eq!(report.steps, 2);
    assert_eq!(report.row("forward").unwrap().calls, 2);
    assert!(shares(&report) <= 100.0 + 1e-6, "{}", report.table());
    assert!(
        timer
            .spans()
            .iter()
            .all(|span| span.action != Action::FirstStep)
    );
}

#[test]
fn the_wall_time_starts_with_the_run_not_its_first_event() {
    let clock = Clock::start();
    let timer = PhaseTimer::new(clock, TimingMode::Accurate);
    // `fit` opens its data (no events) for 40 ms, then runs its first step.
    std::thread::sleep(ms(40));
    run_step(&timer, 1, &PHASES, true);
    timer.on_event(&Event::FirstStep {
        step: 1,
        elapsed: clock.now(),
    });
    run_step(&timer, 2, &PHASES, true);
    let report = timer.report();
    let first = report.row("first_step").unwrap();
    assert!(first.total_seconds >= 0.040);
    assert!(first.percent <= 100.0, "{first:?}");
    assert!(report.wall_seconds >= first.total_seconds, "{report:?}");
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

#[test]
fn the_first_step_of_a_run_gets_its_own_row_and_leaves_the_others() {
    let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
    // Step 1 compiles its kernels: much slower than the steady steps after it.
    let slow = [(Phase::Forward, 30), (Phase::Backward, 40)];
    run_step(&timer, 1, &slow, true);
    timer.on_event(&Event::FirstStep {
        step: 1,
        elapsed: ms(75),
    });
    for step in 2..=3 {
        run_step(&timer, step, &PHASES, true);
    }
    // A later run's first step (another fit on the same timer) is not taken out again.
    timer.on_event(&Event::FirstStep {
        step: 3,
        elapsed: ms(9),
    });
    let report = timer.report();
    assert_eq!(report.steps, 2);
    let forward = report.row("forward").unwrap();
    assert_eq!(forward.calls, 2);
    assert!((forward.total_seconds - 0.004).abs() < 1e-9);
    let first = report.row("first_step").unwrap();
    assert_eq!(first.calls, 1);
    assert!((first.total_seconds - 0.075).abs() < 1e-9);
    let table = report.table();
    assert!(table.contains("first_step: 0.075 s"), "{table}");
    let spans = timer.spans();
    assert_eq!(
        spans
            .iter()
            .filter(|span| span.action == Action::FirstStep)
            .count(),
        1
    );
}

/// A timer that saw no step reports no step row (a `row("step")` lookup then finds nothing,
/// rather than a step row of 0 calls), and its table holds only the total.
#[test]
fn a_report_without_steps_has_no_step_row() {
    let timer = PhaseTimer::new(Clock::start(), TimingMode::Accurate);
    let report = timer.report();
    assert!(report.row("step").is_none(), "{:?}", report.rows);
    assert!(!report.table().contains("| step "), "{}", report.table());
    run_step(&timer, 1, &PHASES, true);
    run_step(&timer, 2, &PHASES, true);
    assert!(timer.report().row("step").is_some());
}
