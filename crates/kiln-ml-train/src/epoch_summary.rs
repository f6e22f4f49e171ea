//! What one epoch of `fit_with` did.

use std::time::Duration;

/// What one epoch of [`Trainer::fit_with`](crate::Trainer::fit_with) did, for its end-of-epoch callback. Counts cover
/// this call only: a run resumed mid-epoch counts from where it resumed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EpochSummary {
    /// The epoch, counted from zero.
    pub epoch: u64,
    /// Optimizer steps run in the epoch (the flushed last window included).
    pub steps: u64,
    /// Samples this rank trained on, as the data reported them.
    pub samples: u64,
    /// Wall time from opening the epoch's data to its end (before the callback), the work its
    /// steps left queued on the device included.
    pub elapsed: Duration,
    /// Of that, the time spent waiting for the next batch.
    pub data_wait: Duration,
}

impl EpochSummary {
    /// Samples per second over the epoch's wall time; 0 for an empty epoch.
    pub fn samples_per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.samples as f64 / seconds
        } else {
            0.0
        }
    }

    /// The share of the wall time spent waiting for data, in [0, 1].
    pub fn data_wait_fraction(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            (self.data_wait.as_secs_f64() / seconds).min(1.0)
        } else {
            0.0
        }
    }
}
