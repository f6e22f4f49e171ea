//! burn-train adapter (feature `burn-train`): the metrics on Burn's `Learner` dashboard.
//!
//! Burn's dashboard shows one number per registered metric, so each [`BurnTrajectoryMetric`]
//! reports one [`ReportedValue`] of a [`TrajectoryMetrics`] state; register one per number you
//! want to watch, made together with [`BurnTrajectoryMetric::set`] so that a batch is measured
//! once for all of them. The model's validation output implements
//! `Adaptor<TrajectoryMetricInput<B>>` to hand over its predictions, as for Burn's own metrics.

use std::marker::PhantomData;
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry,
    SerializedEntry, format_float,
};

use crate::burn_train_batch::SharedBatch;
use crate::config::MetricsConfig;
use crate::metric::TrajectoryMetrics;
use crate::report::MetricReport;
use crate::sums::Mean;
use crate::tensor::TensorTrajectoryBatch;
use crate::{Error, Result};

/// Which number of a [`MetricReport`] a [`BurnTrajectoryMetric`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportedValue {
    /// ADE of the top-ranked hypothesis.
    Ade,
    /// FDE of the top-ranked hypothesis.
    Fde,
    /// minADE@K.
    MinAde,
    /// minFDE@K.
    MinFde,
    /// Miss rate@K.
    MissRate,
    /// brier-minFDE@K.
    BrierMinFde,
    /// p-minADE@K.
    PMinAde,
    /// Actor miss rate@K (joint predictions).
    ActorMissRate,
}

impl ReportedValue {
    fn label(self) -> &'static str {
        match self {
            ReportedValue::Ade => "ADE",
            ReportedValue::Fde => "FDE",
            ReportedValue::MinAde => "minADE",
            ReportedValue::MinFde => "minFDE",
            ReportedValue::MissRate => "MR",
            ReportedValue::BrierMinFde => "brier-minFDE",
            ReportedValue::PMinAde => "p-minADE",
            ReportedValue::ActorMissRate => "actorMR",
        }
    }

    fn unit(self) -> Option<&'static str> {
        match self {
            ReportedValue::MissRate | ReportedValue::ActorMissRate => None,
            _ => Some("m"),
        }
    }
}

/// The input of a [`BurnTrajectoryMetric`]: one batch on the model's device.
#[derive(Debug, Clone)]
pub struct TrajectoryMetricInput<B: Backend> {
    /// The batch.
    pub batch: TensorTrajectoryBatch<B>,
}

impl<B: Backend> TrajectoryMetricInput<B> {
    /// Wraps a batch.
    pub fn new(batch: TensorTrajectoryBatch<B>) -> Self {
        Self { batch }
    }
}

/// One trajectory metric as a burn-train [`Metric`] and [`Numeric`].
///
/// Each update measures the batch on its device and adds it to the epoch's running state;
/// the dashboard shows the batch value and the exact running mean. A rejected batch shows its
/// error and leaves the running state unchanged; [`last_error`](Self::last_error) keeps it.
#[derive(Clone)]
pub struct BurnTrajectoryMetric<B: Backend> {
    name: MetricName,
    value: ReportedValue,
    horizon: usize,
    k: usize,
    running: TrajectoryMetrics,
    batch: Option<(f64, usize)>,
    last_error: Option<Error>,
    /// Shared with the other metrics of its set, which measure each batch once between them.
    shared: SharedBatch,
    /// Updates so far: the n-th update of every metric of a set is the same batch.
    updates: u64,
    _backend: PhantomData<fn() -> B>,
}

impl<B: Backend> std::fmt::Debug for BurnTrajectoryMetric<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurnTrajectoryMetric")
            .field("name", &self.name)
            .field("value", &self.value)
            .field("horizon", &self.horizon)
            .field("k", &self.k)
            .field("running", &self.running)
            .field("last_error", &self.last_error)
            .finish()
    }
}

impl<B: Backend> BurnTrajectoryMetric<B> {
    /// Shows `value` at the first horizon and the largest configured K.
    pub fn new(config: MetricsConfig, value: ReportedValue) -> Result<Self> {
        let k = config.top_k.iter().copied().max().unwrap_or(1);
        Self::at(config, value, 0, k)
    }

    /// Shows `value` at horizon `horizon` (index into the configuration) and `k`.
    pub fn at(
        config: MetricsConfig,
        value: ReportedValue,
        horizon: usize,
        k: usize,
    ) -> Result<Self> {
        config.validate()?;
        if horizon >= config.horizons.len() || !config.top_k.contains(&k) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the dashboard metric asks for horizon {horizon} and K = {k}, but the configuration has {} horizons and K in {:?}",
                    config.horizons.len(),
                    config.top_k
                ),
            });
        }
        let suffix = if config.horizons.len() > 1 {
            format!(" h{horizon}")
        } else {
            String::new()
        };
        let name = match value {
            ReportedValue::Ade | ReportedValue::Fde => {
                format!("{} {}{suffix}", config.name, value.label())
            }
            _ => format!("{} {}@{k}{suffix}", config.name, value.label()),
        };
        Ok(Self {
            name: Arc::new(name),
            value,
            horizon,
            k,
            running: TrajectoryMetrics::new(config)?,
            batch: None,
            last_error: None,
            shared: SharedBatch::default(),
            updates: 0,
            _backend: PhantomData,
        })
    }

    /// One dashboard metric per value, at the first horizon and the largest K, that measure
    /// each batch once between them: register them all in the same `Learner` split (as
    /// `metric_valid_numeric`, say). Metrics made one by one with [`new`](Self::new) each
    /// measure every batch themselves.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::train::metric::Metric;
    /// use kiln_ml_metrics::{BurnTrajectoryMetric, MetricsConfig, ReportedValue};
    ///
    /// let [min_ade, min_fde, miss] = BurnTrajectoryMetric::<Flex>::set(
    ///     MetricsConfig::argoverse2(),
    ///     [ReportedValue::MinAde, ReportedValue::MinFde, ReportedValue::MissRate],
    /// )?;
    /// assert_eq!(miss.name().as_str(), "argoverse2 MR@6");
    /// # let _ = (min_ade, min_fde);
    /// # Ok::<(), kiln_ml_metrics::Error>(())
    /// ```
    pub fn set<const N: usize>(
        config: MetricsConfig,
        values: [ReportedValue; N],
    ) -> Result<[Self; N]> {
        let shared = SharedBatch::for_set();
        let mut metrics = Vec::with_capacity(N);
        for value in values {
            let mut metric = Self::new(config.clone(), value)?;
            metric.shared = shared.clone();
            metrics.push(metric);
        }
        Ok(metrics
            .try_into()
            .unwrap_or_else(|_| unreachable!("one metric per value")))
    }

    /// How many batches this metric's set measured (each batch once, whatever the set's size).
    pub fn batches_measured(&self) -> u64 {
        self.shared.measurements()
    }

    /// The error of the last rejected batch, if the last update was rejected.
    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    /// The running state of the epoch, with every metric.
    pub fn metrics(&self) -> &TrajectoryMetrics {
        &self.running
    }

    /// The report of the epoch so far, with every metric (not only the one shown).
    pub fn report(&self) -> MetricReport {
        self.running.compute()
    }

    /// The reported value and its number of measured predictions.
    fn pick(&self, metrics: &TrajectoryMetrics) -> Mean {
        let Some(horizon) = metrics.sums().horizons.get(self.horizon) else {
            return Mean::default();
        };
        let index = metrics
            .config()
            .top_k
            .iter()
            .position(|&k| k == self.k)
            .unwrap_or(0);
        let Some(at_k) = horizon.top_k.get(index) else {
            return Mean::default();
        };
        match self.value {
            ReportedValue::Ade => horizon.ade,
            ReportedValue::Fde => horizon.fde,
            ReportedValue::MinAde => at_k.min_ade,
            ReportedValue::MinFde => at_k.min_fde,
            ReportedValue::MissRate => at_k.miss,
            ReportedValue::BrierMinFde => at_k.brier_min_fde,
            ReportedValue::PMinAde => at_k.p_min_ade,
            ReportedValue::ActorMissRate => at_k.actor_miss,
        }
    }

    fn entry(&self, batch: Mean) -> SerializedEntry {
        let value = batch.value().unwrap_or(f64::NAN);
        let running = self.pick(&self.running).value().unwrap_or(f64::NAN);
        let unit = self
            .value
            .unit()
            .map(|unit| format!(" {unit}"))
            .unwrap_or_default();
        let formatted = format!(
            "epoch {}{unit} - batch {}{unit}",
            format_float(running, 3),
            format_float(value, 3)
        );
        SerializedEntry::new(formatted, epoch_entry(batch.value(), batch.count))
    }
}

/// The serialized entry Burn averages over the epoch (`Σ value·count / Σ count`): a batch with
/// nothing measured, or rejected, weighs nothing (a NaN there, even with count 0, would make
/// the whole epoch's value NaN).
fn epoch_entry(value: Option<f64>, count: u64) -> String {
    let entry = match value {
        Some(value) => NumericEntry::Aggregated {
            aggregated_value: value,
            count: count as usize,
        },
        None => NumericEntry::Aggregated {
            aggregated_value: 0.0,
            count: 0,
        },
    };
    entry.serialize()
}

impl<B: Backend> Metric for BurnTrajectoryMetric<B> {
    type Input = TrajectoryMetricInput<B>;

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn description(&self) -> Option<String> {
        Some(format!(
            "{} of trajectory forecasts under the `{}` policy",
            self.value.label(),
            self.running.config().name
        ))
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes {
            unit: self.value.unit().map(str::to_owned),
            higher_is_better: false,
        }
        .into()
    }

    fn update(
        &mut self,
        input: &TrajectoryMetricInput<B>,
        metadata: &MetricMetadata,
    ) -> SerializedEntry {
        self.updates += 1;
        let measured = self.shared.get_or_measure(metadata, self.updates, || {
            let mut batch = self.running.clone();
            batch.reset();
            kiln_ml_core::Metric::update(&mut batch, &input.batch).map(|()| batch)
        });
        match measured {
            Ok(batch) => {
                self.running.merge(&batch);
                let picked = self.pick(&batch);
                self.batch = Some((picked.value().unwrap_or(f64::NAN), picked.count as usize));
                self.last_error = None;
                self.entry(picked)
            }
            Err(error) => {
                let formatted = format!("invalid batch: {error}");
                self.batch = None;
                self.last_error = Some(error);
                SerializedEntry::new(formatted, epoch_entry(None, 0))
            }
        }
    }

    fn clear(&mut self) {
        self.running.reset();
        self.batch = None;
        self.last_error = None;
    }
}

impl<B: Backend> Numeric for BurnTrajectoryMetric<B> {
    fn value(&self) -> NumericEntry {
        let (value, count) = self.batch.unwrap_or((f64::NAN, 0));
        NumericEntry::Aggregated {
            aggregated_value: value,
            count,
        }
    }

    fn running_value(&self) -> NumericEntry {
        let mean = self.pick(&self.running);
        NumericEntry::Aggregated {
            aggregated_value: mean.value().unwrap_or(f64::NAN),
            count: mean.count as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::data::dataloader::Progress;
    use burn::tensor::{Tensor, TensorData};

    use super::*;

    fn metadata() -> MetricMetadata {
        MetricMetadata {
            progress: Progress {
                items_processed: 1,
                items_total: 1,
            },
            global_progress: Progress {
                items_processed: 0,
                items_total: 1,
            },
            iteration: Some(0),
            lr: None,
        }
    }

    /// One agent, one mode, two steps, ending `error_m` meters off.
    fn input(error_m: f32) -> TrajectoryMetricInput<Flex> {
        let device = Default::default();
        let predictions = Tensor::<Flex, 4>::from_data(
            TensorData::new(vec![0.0, 0.0, error_m, 0.0], [1, 1, 2, 2]),
            &device,
        );
        let truth =
            Tensor::<Flex, 3>::from_data(TensorData::new(vec![0.0f32; 4], [1, 2, 2]), &device);
        TrajectoryMetricInput::new(TensorTrajectoryBatch::new(predictions, truth).unwrap())
    }

    #[test]
    fn the_dashboard_metric_reports_batch_and_running_values() {
        let mut metric =
            BurnTrajectoryMetric::<Flex>::new(MetricsConfig::argoverse2(), ReportedValue::MinFde)
                .unwrap();
        assert_eq!(metric.name().as_str(), "argoverse2 minFDE@6");
        let entry = metric.update(&input(1.0), &metadata());
        assert_eq!(entry.serialized, "1,1");
        metric.update(&input(3.0), &metadata());
        assert_eq!(metric.value().current(), 3.0);
        assert_eq!(metric.running_value().current(), 2.0);
        assert!(matches!(
            metric.running_value(),
            NumericEntry::Aggregated { count: 2, .. }
        ));

        let mut miss =
            BurnTrajectoryMetric::<Flex>::new(MetricsConfig::argoverse2(), ReportedValue::MissRate)
                .unwrap();
        miss.update(&input(3.0), &metadata());
        assert_eq!(miss.running_value().current(), 1.0);
        assert!(matches!(
            miss.attributes(),
            MetricAttributes::Numeric(NumericAttributes {
                higher_is_better: false,
                ..
            })
        ));

        metric.clear();
        assert!(metric.running_value().current().is_nan());
    }

    #[test]
    fn a_rejected_batch_shows_its_error_and_changes_nothing() {
        let mut metric =
            BurnTrajectoryMetric::<Flex>::new(MetricsConfig::argoverse2(), ReportedValue::MinAde)
                .unwrap();
        metric.update(&input(2.0), &metadata());
        let entry = metric.update(&input(f32::NAN), &metadata());
        assert!(
            entry
                .formatted
                .contains("non-finite value NaN in `predictions` at agent 0"),
            "{}",
            entry.formatted
        );
        assert!(metric.last_error().is_some());
        assert_eq!(metric.running_value().current(), 1.0);
    }

    /// Burn's epoch value: the mean of the serialized entries, weighted by their counts.
    fn epoch_value(entries: &[SerializedEntry]) -> f64 {
        let (sum, count) =
            entries.iter().fold(
                (0.0, 0),
                |(sum, count), entry| match NumericEntry::deserialize(&entry.serialized).unwrap() {
                    NumericEntry::Value(value) => (sum + value, count + 1),
                    NumericEntry::Aggregated {
                        aggregated_value,
                        count: n,
                    } => (sum + aggregated_value * n as f64, count + n),
                },
            );
        sum / count as f64
    }

    #[test]
    fn batches_without_a_value_leave_the_epoch_value_alone() {
        let mut metric =
            BurnTrajectoryMetric::<Flex>::new(MetricsConfig::argoverse2(), ReportedValue::MinFde)
                .unwrap();
        let measured = metric.update(&input(1.0), &metadata());
        let rejected = metric.update(&input(f32::NAN), &metadata());
        // An agent without one valid step: nothing measured.
        let nothing = input(5.0);
        let device = Default::default();
        let invalid = Tensor::<Flex, 2, burn::tensor::Bool>::from_data(
            TensorData::from([[false, false]]),
            &device,
        );
        let nothing = TrajectoryMetricInput::new(nothing.batch.with_valid(invalid).unwrap());
        let empty = metric.update(&nothing, &metadata());
        assert_eq!(epoch_value(&[measured, rejected, empty]), 1.0);
    }

    fn metadata_at(batch: usize) -> MetricMetadata {
        let mut metadata = metadata();
        metadata.progress.items_processed = batch;
        metadata.iteration = Some(batch);
        metadata
    }

    #[test]
    fn a_set_measures_each_batch_once_and_reports_like_single_metrics() {
        let values = [
            ReportedValue::MinAde,
            ReportedValue::MinFde,
            ReportedValue::MissRate,
        ];
        let mut set =
            BurnTrajectoryMetric::<Flex>::set(MetricsConfig::argoverse2(), values).unwrap();
        let mut singles = values.map(|value| {
            BurnTrajectoryMetric::<Flex>::new(MetricsConfig::argoverse2(), value).unwrap()
        });
        for (batch, error) in [1.0, 3.0, 0.5].into_iter().enumerate() {
            for metric in set.iter_mut().chain(singles.iter_mut()) {
                metric.update(&input(error), &metadata_at(batch));
            }
        }
        assert_eq!(set[0].batches_measured(), 3);
        assert_eq!(singles[0].batches_measured(), 3);
        for (shared, single) in set.iter().zip(&singles) {
            assert_eq!(
                shared.running_value().serialize(),
                single.running_value().serialize()
            );
            assert_eq!(shared.value().serialize(), single.value().serialize());
            assert!(shared.running_value().current() > 0.0);
        }
    }

    /// Under burn-train's data-parallel strategy every device's batch reaches the metrics with
    /// the same metadata (iteration and scaled progress): a set still measures each one.
    #[test]
    fn a_set_measures_batches_that_arrive_with_equal_metadata() {
        let values = [ReportedValue::MinFde, ReportedValue::MissRate];
        let mut set =
            BurnTrajectoryMetric::<Flex>::set(MetricsConfig::argoverse2(), values).unwrap();
        // Two devices' batches of one step, each through every metric of the set in turn (the
        // order burn-train's shared event processor updates them in).
        for error in [1.0, 3.0] {
            for metric in set.iter_mut() {
                metric.update(&input(error), &metadata_at(7));
            }
        }
        assert_eq!(set[0].batches_measured(), 2);
        assert_eq!(set[0].running_value().current(), 2.0);
        assert_eq!(set[0].value().current(), 3.0);
        assert_eq!(set[1].running_value().current(), 0.5);
    }

    #[test]
    fn unknown_horizons_or_k_are_rejected() {
        let error =
            BurnTrajectoryMetric::<Flex>::at(MetricsConfig::waymo(), ReportedValue::MinFde, 3, 6)
                .unwrap_err();
        assert!(error.to_string().contains("horizon 3"), "{error}");
        let name =
            BurnTrajectoryMetric::<Flex>::at(MetricsConfig::waymo(), ReportedValue::MissRate, 2, 6)
                .unwrap()
                .name();
        assert_eq!(name.as_str(), "waymo MR@6 h2");
    }
}
