//! What [`Throughput`](super::Throughput) takes and what it reports.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Totals since the start of training, read after an optimizer step. Every counter only grows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ThroughputSample {
    /// Time since the start, read after a device sync.
    pub elapsed: Duration,
    /// Optimizer steps taken.
    pub optimizer_steps: u64,
    /// Micro-batches run (forward + backward), K per optimizer step with gradient accumulation.
    pub micro_batches: u64,
    /// Samples consumed.
    pub samples: u64,
    /// Items consumed (tokens, points), padding included, when they mean something.
    pub items: Option<u64>,
    /// FLOPs done so far (cumulative, unlike Lightning's per-update `flops`); see
    /// [`flops`](crate::flops) for analytic counts.
    pub flops: Option<f64>,
}

/// Rates over the window, per second. Items, FLOPs and MFU are `None` when the oldest or newest
/// update of the window lacks them, or no peak was given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputReport {
    /// Optimizer steps per second.
    pub steps_per_s: f64,
    /// Micro-batches per second (K × `steps_per_s` with K-step gradient accumulation).
    pub micro_batches_per_s: f64,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Items per second (tokens/s), padding included.
    pub items_per_s: Option<f64>,
    /// FLOP/s achieved.
    pub flops_per_s: Option<f64>,
    /// Model FLOPs utilization: `flops_per_s / peak_flops_per_s`.
    pub mfu: Option<f64>,
    /// The peak MFU is measured against.
    pub peak_flops_per_s: Option<f64>,
    /// Optimizer steps inside the window.
    pub window_steps: u64,
    /// Seconds the window spans.
    pub window_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_serializes_with_units_in_names() {
        let report = ThroughputReport {
            steps_per_s: 1.0,
            micro_batches_per_s: 4.0,
            samples_per_s: 32.0,
            items_per_s: None,
            flops_per_s: Some(1e9),
            mfu: None,
            peak_flops_per_s: None,
            window_steps: 1,
            window_seconds: 1.0,
        };
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"steps_per_s":1.0,"micro_batches_per_s":4.0,"samples_per_s":32.0,"items_per_s":null,"flops_per_s":1000000000.0,"mfu":null,"peak_flops_per_s":null,"window_steps":1,"window_seconds":1.0}"#
        );
    }
}
