//! One measurement per batch for every dashboard metric of a set (feature `burn-train`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::train::metric::MetricMetadata;

use crate::Result;
use crate::metric::TrajectoryMetrics;

/// Where a batch stands in training, as burn-train tells every metric of that batch: the same
/// for all of them, different from one batch to the next.
type BatchKey = (usize, usize, usize, usize, Option<usize>);

/// A batch and its measurement (or the error that rejected it).
type Measured = (BatchKey, Result<TrajectoryMetrics>);

fn batch_key(metadata: &MetricMetadata) -> BatchKey {
    (
        metadata.global_progress.items_processed,
        metadata.global_progress.items_total,
        metadata.progress.items_processed,
        metadata.progress.items_total,
        metadata.iteration,
    )
}

/// The last batch measured by a set of dashboard metrics, shared by all of them: the first
/// metric that sees a batch measures it, the others reuse its sums. A metric alone measures
/// every update (its caller may hand it several batches under one progress).
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
    /// measured this batch.
    pub(crate) fn get_or_measure(
        &self,
        metadata: &MetricMetadata,
        measure: impl FnOnce() -> Result<TrajectoryMetrics>,
    ) -> Result<TrajectoryMetrics> {
        if !self.shared {
            self.measurements.fetch_add(1, Ordering::Relaxed);
            return measure();
        }
        let key = batch_key(metadata);
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
