//! [`TrajectoryMetrics`]: the configured accumulator behind kiln-ml-core's `Metric` seam.

use kiln_ml_core::Metric;

use crate::batch::TrajectoryBatch;
use crate::config::MetricsConfig;
use crate::host::{Parallelism, measure, plan_batch};
use crate::report::MetricReport;
use crate::sums::MetricSums;
use crate::{Error, Result};

/// Every configured metric at every horizon and K, as one streaming, mergeable state.
///
/// It consumes host batches ([`TrajectoryBatch`]) and Burn tensor batches
/// ([`TensorTrajectoryBatch`](crate::TensorTrajectoryBatch)) into the same sums, so per-thread,
/// per-rank and per-device states merge into exactly what one pass over everything gives.
///
/// ```
/// use kiln_ml_core::Metric;
/// use kiln_ml_metrics::{BatchShape, MetricsConfig, TrajectoryBatch};
///
/// // One agent, two modes, three steps; the second mode is exact.
/// let truth = [0.0, 0.0, 1.0, 0.0, 2.0, 0.0];
/// let predictions = [0.0, 1.0, 1.0, 1.0, 2.0, 1.0, /* mode 1 */ 0.0, 0.0, 1.0, 0.0, 2.0, 0.0];
/// let batch = TrajectoryBatch::new(BatchShape::new(1, 2, 3), &predictions, &truth)?
///     .with_probabilities(&[0.75, 0.25])?;
///
/// let mut metrics = MetricsConfig::argoverse2().init()?;
/// metrics.update(&batch)?;
/// let report = metrics.compute();
/// let at_6 = report.at(6).unwrap();
/// assert_eq!(at_6.min_fde, Some(0.0));
/// assert_eq!(at_6.miss_rate, Some(0.0));
/// assert_eq!(at_6.brier_min_fde, Some(0.5625)); // (1 - 0.25)^2
/// // K = 1 keeps only the most probable mode, one meter off at every step.
/// assert_eq!(report.at(1).unwrap().min_ade, Some(1.0));
/// # Ok::<(), kiln_ml_metrics::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryMetrics {
    config: MetricsConfig,
    sums: MetricSums,
    parallelism: Parallelism,
}

impl TrajectoryMetrics {
    /// Metrics under `config` (validated here), with [`Parallelism::Auto`] on the host; the
    /// same as [`MetricsConfig::init`].
    pub fn new(config: MetricsConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            sums: MetricSums::for_config(&config),
            config,
            parallelism: Parallelism::default(),
        })
    }

    /// Sets how host batches are spread over threads.
    pub fn with_parallelism(mut self, parallelism: Parallelism) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &MetricsConfig {
        &self.config
    }

    /// The accumulated sums (for checkpointing or sending to another rank).
    pub fn sums(&self) -> &MetricSums {
        &self.sums
    }

    /// Adds sums measured elsewhere under the same configuration (another rank's state).
    pub fn add_sums(&mut self, sums: &MetricSums) -> Result<()> {
        if !self.sums.same_layout(sums) {
            return Err(Error::ConfigMismatch {
                left: self.config.name.clone(),
                right: "sums of another layout".into(),
            });
        }
        self.sums.merge(sums);
        Ok(())
    }

    /// Merges another state, failing when the configurations differ.
    pub fn try_merge(&mut self, other: &Self) -> Result<()> {
        if self.config != other.config {
            return Err(Error::ConfigMismatch {
                left: self.config.name.clone(),
                right: other.config.name.clone(),
            });
        }
        self.sums.merge(&other.sums);
        Ok(())
    }

    /// The report of everything accumulated (what both `Metric` impls' `compute` return).
    pub fn compute(&self) -> MetricReport {
        MetricReport::new(&self.config, &self.sums)
    }

    /// Adds `other`'s sums (what both `Metric` impls' `merge` do).
    ///
    /// Merging states of different configurations is a programming error: their sums are
    /// combined position by position. Use [`try_merge`](Self::try_merge) to have it checked.
    pub fn merge(&mut self, other: &Self) {
        debug_assert_eq!(
            self.config, other.config,
            "merging metrics of different configurations"
        );
        self.sums.merge(&other.sums);
    }

    /// Forgets everything accumulated (what both `Metric` impls' `reset` do).
    pub fn reset(&mut self) {
        self.sums = MetricSums::for_config(&self.config);
    }

    /// Adds sums computed for one batch by either path.
    pub(crate) fn absorb(&mut self, sums: &MetricSums) {
        self.sums.merge(sums);
    }
}

impl<'a> Metric<TrajectoryBatch<'a>> for TrajectoryMetrics {
    type Value = MetricReport;
    type Error = Error;

    fn update(&mut self, batch: &TrajectoryBatch<'a>) -> Result<()> {
        let plan = plan_batch(&self.config, batch)?;
        let sums = measure(&self.config, &plan, batch, self.parallelism);
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

impl MetricsConfig {
    /// Streaming metrics under this configuration (validated here), with
    /// [`Parallelism::Auto`] on the host.
    pub fn init(self) -> Result<TrajectoryMetrics> {
        TrajectoryMetrics::new(self)
    }
}
