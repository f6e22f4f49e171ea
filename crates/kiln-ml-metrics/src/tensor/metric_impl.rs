//! `Metric<TensorTrajectoryBatch<B>>` for [`TrajectoryMetrics`]: the tensor path's entry point.

use burn::tensor::backend::Backend;
use kiln_ml_core::Metric;

use crate::metric::TrajectoryMetrics;
use crate::report::MetricReport;
use crate::tensor::{TensorTrajectoryBatch, measure};
use crate::{Error, Result};

/// Measures tensor batches on their device: predictions never leave it; per batch only a few
/// hundred block sums per metric (and, for a rejected batch, the offending row) are read back.
impl<B: Backend> Metric<TensorTrajectoryBatch<B>> for TrajectoryMetrics {
    type Value = MetricReport;
    type Error = Error;

    fn update(&mut self, batch: &TensorTrajectoryBatch<B>) -> Result<()> {
        let sums = measure::measure_tensors(self.config(), batch)?;
        self.absorb(&sums);
        Ok(())
    }

    fn merge(&mut self, other: &Self) {
        TrajectoryMetrics::merge(self, other);
    }

    fn compute(&self) -> MetricReport {
        TrajectoryMetrics::compute(self)
    }

    fn reset(&mut self) {
        TrajectoryMetrics::reset(self);
    }
}
