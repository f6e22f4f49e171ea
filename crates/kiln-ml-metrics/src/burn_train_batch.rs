//! One measurement per batch for every dashboard metric of a set (feature `burn-train`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::train::metric::MetricMetadata;

use crate::Result;
use crate::metric::TrajectoryMetrics;

/// Which batch a metric is updated with: where it stands in training, as burn-train tells every
/// metric of that batch, and the metric's own update count. The metadata alone does not tell
/// batches apart under burn-train's data-parallel strategy, which hands every device's batch of
/// a step to the metrics with the same iteration and progress; it still tells a set registered
/// in two splits apart, whose counts differ.
type BatchKey = ((usize, usize, usize, usize, Option<usize>), u64);

/// A batch and its measurement (or the error that rejected it).
type Measured = (BatchKey, Result<TrajectoryMetrics>);

fn batch_key(metadata: &MetricMetadata, update: u64) -> BatchKey {
    (
        (
            metadata.global_progress.items_processed,
            metadata.global_progress.items_total,
            metadata.progress.items_processed,
            metadata.progress.items_total,
            metadata.iteration,
        ),
        update,
    )
}

/// The last batch measured by a set of dashboard metrics, shared by all of them: the first
/// metric that sees a batch measures it, the others reuse its sums. burn-train updates every
/// metric of a split with each batch before the next batch, so the n-th update of each is the
/// same batch. A metric alone measures every update.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedBatch {
    shared: bool,
    last: Arc<Mutex<Option<Measured>>>,
    measurements: Arc<AtomicU64>,
}

impl SharedBatch {
    /// The cache of a set of metrics.
    pub(crate) fn for_set() -> Self {
        Self {
            shared: true,
            ..Self::default()
        }
    }

    /// The batch's metrics, measured by `measure` unless another metric of the set already
    /// measured this batch (`update`: the asking metric's update count, from 1).
    pub(crate) fn get_or_measure(
        &self,
        metadata: &MetricMetadata,
        update: u64,
        measure: impl FnOnce() -> Result<TrajectoryMetrics>,
    ) -> Result<TrajectoryMetrics> {
        if !self.shared {
            self.measurements.fetch_add(1, Ordering::Relaxed);
            return measure();
        }
        let key = batch_key(metadata, update);
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some((seen, measured)) = last.as_ref()
            && *seen == key
        {
            return measured.clone();
        }
        self.measurements.fetch_add(1, Ordering::Relaxed);
        let measured = measure();
        *last = Some((key, measured.clone()));
        measured
    }

    /// How many batches the set measured.
    pub(crate) fn measurements(&self) -> u64 {
        self.measurements.load(Ordering::Relaxed)
    }
}
