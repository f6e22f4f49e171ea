//! How much the phase timer asks the trainer to sync the device.

use kiln_ml_core::Timing;
use serde::{Deserialize, Serialize};

/// How a [`PhaseTimer`](crate::PhaseTimer) times steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingMode {
    /// A device sync at every phase boundary: every phase measures its device work, at the
    /// cost of the overlap between host and device (reported as sync time).
    Accurate,
    /// An accurate step (a sync at every phase) every `every` steps, from which the split into
    /// phases is estimated, and one sync at the end of the step before it, so the accurate step
    /// starts on an idle device; no sync in the steps between, so the host keeps queuing work
    /// ahead of the device. The steps between are timed by the host (each is how long the host
    /// took to queue it, plus any wait the trainer adds); the sync before the accurate step
    /// brings their total back to the device's. The cheap default for long runs.
    Cheap {
        /// One accurate step in this many (at least 1).
        every: u64,
    },
    /// No sync at all: phases measure how long the host took to enqueue work. Only right on
    /// backends that execute eagerly on the host (flex).
    Host,
}

impl TimingMode {
    /// Cheap mode with one accurate step in 200. An accurate step costs about two steps' time
    /// (its syncs, and the overlap with the host they end: `step_overhead` measures it), so one
    /// in 200 keeps the timer near 1% of the run; a run of thousands of steps still gets tens of
    /// accurate steps for its split into phases.
    pub const CHEAP: TimingMode = TimingMode::Cheap { every: 200 };

    /// What this mode asks of the trainer for step `step`.
    pub fn timing(self, step: u64) -> Timing {
        match self {
            TimingMode::Accurate => Timing::Phases,
            TimingMode::Cheap { every } if step.is_multiple_of(every.max(1)) => Timing::Phases,
            TimingMode::Cheap { every } if (step + 1).is_multiple_of(every.max(1)) => Timing::Step,
            TimingMode::Cheap { .. } => Timing::Host,
            TimingMode::Host => Timing::Host,
        }
    }

    /// Whether step `step` has a device sync at every phase in this mode.
    pub fn is_accurate_step(self, step: u64) -> bool {
        self.timing(step) == Timing::Phases
    }
}

impl Default for TimingMode {
    fn default() -> Self {
        TimingMode::CHEAP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cheap_mode_syncs_fully_every_n_and_once_the_step_before() {
        let mode = TimingMode::Cheap { every: 4 };
        let timings: Vec<Timing> = (1..=8).map(|step| mode.timing(step)).collect();
        assert_eq!(
            timings,
            [
                Timing::Host,
                Timing::Host,
                Timing::Step,
                Timing::Phases,
                Timing::Host,
                Timing::Host,
                Timing::Step,
                Timing::Phases
            ]
        );
        let every_second = TimingMode::Cheap { every: 2 };
        assert_eq!(every_second.timing(1), Timing::Step);
        assert_eq!(every_second.timing(2), Timing::Phases);
        assert_eq!(TimingMode::Cheap { every: 0 }.timing(7), Timing::Phases);
        assert_eq!(TimingMode::Accurate.timing(2), Timing::Phases);
        assert_eq!(TimingMode::Host.timing(2), Timing::Host);
    }
}
