//! The phase table's rows from the timer's state: measured, or estimated from the accurate
//! steps in cheap mode.

use std::time::Duration;

use super::Action;
use super::TimingMode;
use super::report::PhaseRow;
use super::state::State;
use super::tally::Tally;

/// Every action's row, with its share of the wall time, and the wall time.
pub(super) fn rows(state: &State, mode: TimingMode) -> (Vec<PhaseRow>, Duration) {
    let wall = state.first_event.map_or(Duration::ZERO, |first| {
        state.last_event.saturating_sub(first)
    });
    let estimated = !matches!(mode, TimingMode::Accurate | TimingMode::Host)
        && state.tallies.accurate_steps.calls < state.tallies.steps.calls;
    let mut rows = Vec::new();
    for action in Action::ALL {
        let row = match action {
            // Only once a step was timed: a report without steps has no step row to misread.
            Action::Step => (state.tallies.steps.calls > 0)
                .then(|| row_from(action, &state.tallies.steps, false)),
            Action::FirstStep => state.first_step.map(|(_, elapsed)| {
                let mut once = Tally::default();
                once.add(elapsed);
                row_from(action, &once, false)
            }),
            Action::Other => other_row(state, estimated),
            Action::DataWait | Action::Validation | Action::Checkpoint => state
                .tallies
                .all
                .get(&action)
                .map(|all| row_from(action, all, false)),
            _ => phase_row(state, action, estimated),
        };
        rows.extend(row);
    }
    for row in &mut rows {
        row.percent = percent(row.total_seconds, wall.as_secs_f64());
    }
    (rows, wall)
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
/// their time outside the data wait, applied to the same time of all steps (exact over each
/// window of steps in cheap mode, whose step before the accurate one ends with a sync). Before
/// any accurate step, the host's times, marked estimated.
fn phase_row(state: &State, action: Action, estimated: bool) -> Option<PhaseRow> {
    let all = state.tallies.all.get(&action)?;
    if !estimated {
        return Some(row_from(action, all, false));
    }
    if state.tallies.accurate_steps.calls == 0 {
        return Some(row_from(action, all, true));
    }
    let accurate = state
        .tallies
        .accurate
        .get(&action)
        .map_or(Duration::ZERO, |tally| tally.total);
    Some(estimated_row(state, action, accurate, all.calls))
}

/// The rest of the steps, estimated like a phase when not every step was accurate.
fn other_row(state: &State, estimated: bool) -> Option<PhaseRow> {
    if state.tallies.steps.calls == 0 {
        return None;
    }
    if !estimated || state.tallies.accurate_steps.calls == 0 {
        let mut row = row_from(Action::Other, &state.tallies.other, estimated);
        row.calls = state.tallies.steps.calls;
        return Some(row);
    }
    Some(estimated_row(
        state,
        Action::Other,
        state.tallies.accurate_other.total,
        state.tallies.steps.calls,
    ))
}

/// `accurate_total` scaled from the accurate steps' device time to all steps' device time
/// (each without its data wait).
fn estimated_row(state: &State, action: Action, accurate_total: Duration, calls: u64) -> PhaseRow {
    let accurate_work = state
        .tallies
        .accurate_steps
        .total
        .saturating_sub(state.tallies.accurate_wait_in_steps);
    let all_work = state
        .tallies
        .steps
        .total
        .saturating_sub(state.tallies.wait_in_steps);
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
