//! [`TrajectoryMetrics`] over tensor batches with one read-back per pass, not per batch.

use burn::tensor::backend::Backend;
use burn::tensor::{TensorData, Transaction};
use kiln_ml_core::Metric;

use crate::config::MetricsConfig;
use crate::metric::TrajectoryMetrics;
use crate::report::MetricReport;
use crate::sums::MetricSums;
use crate::tensor::TensorTrajectoryBatch;
use crate::tensor::measure::{Launched, launch};
use crate::{Error, Result};

/// Batches kept in flight before a read-back is forced: bounds the device memory the kept
/// batches hold (each stays alive until read, so an invalid value can still be located).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// [`TrajectoryMetrics`] for [`TensorTrajectoryBatch`]es that reads the device back once per
/// pass: [`update`](Metric::update) queues a batch's reductions on its device and returns;
/// [`flush`](Metric::flush) reads every queued batch's block sums back in one transaction and
/// adds them (kiln-ml-train's validation calls it once at the end of each pass). The plain
/// `TrajectoryMetrics` reads each batch back in its `update`, which makes the host wait for the
/// device once per validation batch.
///
/// The values are the plain metric's, bit for bit (the same block sums, added in the same
/// order). Each queued batch stays alive until read (its tensors are shared handles, not
/// copies), so an invalid value found at the read-back is located and reported as the plain
/// metric would, naming the batch's index in the pass (the other batches are added, the
/// invalid one is not, as if its `update` had failed); after
/// [`max_in_flight`](Self::with_max_in_flight) batches a read-back is forced, which bounds that
/// memory. [`compute`](Metric::compute) and [`merge`](Metric::merge) (on the merged-in state)
/// read back what is still queued without keeping it: flush first, since an invalid value found
/// there panics, having no error to return.
pub struct DeviceTrajectoryMetrics<B: Backend> {
    metrics: TrajectoryMetrics,
    in_flight: Vec<InFlight<B>>,
    max_in_flight: usize,
    /// Batches seen since the last reset: the index the next one gets.
    batches: u64,
}

/// A batch queued on its device, with its index in the pass.
struct InFlight<B: Backend> {
    index: u64,
    batch: TensorTrajectoryBatch<B>,
    launched: Launched<B>,
}

impl<B: Backend> DeviceTrajectoryMetrics<B> {
    /// Metrics of `config`, reading back at most every [`DEFAULT_MAX_IN_FLIGHT`] batches.
    pub fn new(config: MetricsConfig) -> Result<Self> {
        Ok(Self::from_metrics(TrajectoryMetrics::new(config)?))
    }

    /// Wraps existing metrics (their configuration and what they accumulated).
    pub fn from_metrics(metrics: TrajectoryMetrics) -> Self {
        Self {
            metrics,
            in_flight: Vec::new(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            batches: 0,
        }
    }

    /// Forces a read-back once `batches` batches are queued (at least 1).
    pub fn with_max_in_flight(mut self, batches: usize) -> Self {
        self.max_in_flight = batches.max(1);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &MetricsConfig {
        self.metrics.config()
    }

    /// Batches queued and not read back yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The metrics of every batch read back so far (flush first to include all).
    pub fn metrics(&self) -> &TrajectoryMetrics {
        &self.metrics
    }

    /// Reads `queued` back in one transaction and returns each batch's sums, in order, or the
    /// error of a batch with an invalid value (located in it, named with its index).
    fn read(config: &MetricsConfig, queued: Vec<InFlight<B>>) -> Result<Vec<Result<MetricSums>>> {
        let mut transaction = Transaction::default();
        for item in &queued {
            if let Some(block_sums) = &item.launched.block_sums {
                transaction = transaction.register(block_sums.clone());
            }
        }
        let mut data: std::vec::IntoIter<TensorData> = transaction
            .try_execute()
            .map_err(|error| Error::Device {
                reason: format!("{error:?}"),
            })?
            .into_iter();
        let mut sums = Vec::with_capacity(queued.len());
        for item in queued {
            let totals = match &item.launched.block_sums {
                Some(_) => {
                    let read = data.next().ok_or_else(|| Error::Device {
                        reason: "the device returned fewer results than it was asked for"
                            .to_owned(),
                    })?;
                    item.launched
                        .totals(&read.iter::<f64>().collect::<Vec<_>>())
                }
                None => Vec::new(),
            };
            sums.push(
                item.launched
                    .finish(config, &item.batch, &totals)
                    .map_err(|error| Error::InBatch {
                        batch: item.index,
                        source: Box::new(error),
                    }),
            );
        }
        Ok(sums)
    }
}

impl<B: Backend> Metric<TensorTrajectoryBatch<B>> for DeviceTrajectoryMetrics<B> {
    type Value = MetricReport;
    type Error = Error;

    fn update(&mut self, batch: &TensorTrajectoryBatch<B>) -> Result<()> {
        // Counted first: a batch refused at launch is one of the batches seen, so later
        // batches keep the index the caller counts.
        let index = self.batches;
        self.batches += 1;
        let launched = launch(self.metrics.config(), batch)?;
        self.in_flight.push(InFlight {
            index,
            batch: batch.clone(),
            launched,
        });
        if self.in_flight.len() >= self.max_in_flight {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds `other`'s sums. What `other` still has in flight is read back, not moved (merging
    /// keeps `other`); an invalid value found there panics: flush `other` first.
    fn merge(&mut self, other: &Self) {
        self.metrics.merge(&other.compute_metrics());
    }

    fn compute(&self) -> MetricReport {
        self.compute_metrics().compute()
    }

    fn reset(&mut self) {
        self.metrics.reset();
        self.in_flight.clear();
        self.batches = 0;
    }

    fn flush(&mut self) -> Result<()> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        // Read from copies of the handles: a read-back the device fails keeps every queued
        // batch, to be read again, rather than lose them.
        let read = Self::read(self.metrics.config(), self.queued_copy())?;
        self.in_flight.clear();
        // Every valid batch is added; an invalid one is left out, as a failed `update` of the
        // plain metric adds nothing, and the first is the error.
        let mut first_error = None;
        for sums in read {
            match sums {
                Ok(sums) => self.metrics.absorb(&sums),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl<B: Backend> DeviceTrajectoryMetrics<B> {
    /// The queued batches again, as handles to the same tensors (no copy on the device).
    fn queued_copy(&self) -> Vec<InFlight<B>> {
        (self.in_flight.iter())
            .map(|item| InFlight {
                index: item.index,
                batch: item.batch.clone(),
                launched: item.launched.clone(),
            })
            .collect()
    }

    /// The metrics with what is in flight added, read back without changing `self`.
    fn compute_metrics(&self) -> TrajectoryMetrics {
        let mut metrics = self.metrics.clone();
        if self.in_flight.is_empty() {
            return metrics;
        }
        let read = Self::read(self.metrics.config(), self.queued_copy())
            .and_then(|sums| sums.into_iter().collect::<Result<Vec<_>>>());
        match read {
            Ok(sums) => sums.iter().for_each(|batch| metrics.absorb(batch)),
            Err(error) => panic!(
                "DeviceTrajectoryMetrics: {error}, found reading back queued batches for \
                 `compute` or `merge` (call `flush` first to get it as an error)"
            ),
        }
        metrics
    }
}
