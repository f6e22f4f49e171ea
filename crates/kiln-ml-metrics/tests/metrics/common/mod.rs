//! Shared test helpers: one case, measured on the host and on the flex tensor backend.

#![allow(dead_code)]

use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};
use kiln_ml_core::Metric;
use kiln_ml_metrics::{
    BatchShape, MetricReport, MetricsConfig, Parallelism, Result, TensorTrajectoryBatch,
    TrajectoryBatch, TrajectoryMetrics,
};

/// How far the host and tensor paths may differ (relative, with an absolute floor).
pub const PATH_TOLERANCE: f64 = 1e-5;

/// One batch of owned inputs.
#[derive(Debug, Clone)]
pub struct Case {
    pub shape: BatchShape,
    pub predictions: Vec<f32>,
    pub ground_truth: Vec<f32>,
    pub probabilities: Option<Vec<f32>>,
    pub valid: Option<Vec<bool>>,
    pub velocity: Option<Vec<f32>>,
    pub heading: Option<Vec<f32>>,
}

impl Case {
    /// A case from per-agent forecasts `[K][T]` of points and ground truth `[T]` points.
    pub fn from_points(forecasts: &[Vec<Vec<[f32; 2]>>], truth: &[Vec<[f32; 2]>]) -> Self {
        let agents = truth.len();
        let modes = forecasts[0].len();
        let steps = truth[0].len();
        Self {
            shape: BatchShape::new(agents, modes, steps),
            predictions: forecasts
                .iter()
                .flatten()
                .flatten()
                .flatten()
                .copied()
                .collect(),
            ground_truth: truth.iter().flatten().flatten().copied().collect(),
            probabilities: None,
            valid: None,
            velocity: None,
            heading: None,
        }
    }

    pub fn with_probabilities(mut self, probabilities: &[f32]) -> Self {
        self.probabilities = Some(probabilities.to_vec());
        self
    }

    pub fn host_batch(&self) -> Result<TrajectoryBatch<'_>> {
        let mut batch = TrajectoryBatch::new(self.shape, &self.predictions, &self.ground_truth)?;
        if let Some(p) = &self.probabilities {
            batch = batch.with_probabilities(p)?;
        }
        if let Some(v) = &self.valid {
            batch = batch.with_valid(v)?;
        }
        if let Some(v) = &self.velocity {
            batch = batch.with_velocity(v)?;
        }
        if let Some(h) = &self.heading {
            batch = batch.with_heading(h)?;
        }
        Ok(batch)
    }

    pub fn tensor_batch(&self) -> Result<TensorTrajectoryBatch<Flex>> {
        self.tensor_batch_on::<Flex>(&Default::default())
    }

    /// The case as tensors on any backend's device.
    pub fn tensor_batch_on<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<TensorTrajectoryBatch<B>> {
        let BatchShape {
            agents: n,
            modes: k,
            steps: t,
        } = self.shape;
        let float = |values: &[f32], shape: Vec<usize>| {
            Tensor::<B, 2>::from_data(TensorData::new(values.to_vec(), shape), device)
        };
        let predictions = Tensor::<B, 4>::from_data(
            TensorData::new(self.predictions.clone(), [n, k, t, 2]),
            device,
        );
        let truth = Tensor::<B, 3>::from_data(
            TensorData::new(self.ground_truth.clone(), [n, t, 2]),
            device,
        );
        let mut batch = TensorTrajectoryBatch::new(predictions, truth)?;
        if let Some(p) = &self.probabilities {
            // A length that is no multiple of K becomes one row of the wrong width.
            let shape = if p.len() % k == 0 {
                vec![p.len() / k, k]
            } else {
                vec![1, p.len()]
            };
            batch = batch.with_probabilities(float(p, shape))?;
        }
        if let Some(v) = &self.valid {
            let mask = Tensor::<B, 2, Bool>::from_data(TensorData::new(v.clone(), [n, t]), device);
            batch = batch.with_valid(mask)?;
        }
        if let Some(v) = &self.velocity {
            batch = batch.with_velocity(float(v, vec![n, 2]))?;
        }
        if let Some(h) = &self.heading {
            batch = batch.with_heading(float(h, vec![n, t]))?;
        }
        Ok(batch)
    }

    /// The report of the host path.
    pub fn host(&self, config: &MetricsConfig) -> Result<MetricReport> {
        let mut metrics =
            TrajectoryMetrics::new(config.clone())?.with_parallelism(Parallelism::Sequential);
        metrics.update(&self.host_batch()?)?;
        Ok(metrics.compute())
    }

    /// The report of the host path for the batch as `extend` completes it (trajectory types,
    /// boxes: the inputs only host batches take).
    pub fn host_with<'a>(
        &'a self,
        config: &MetricsConfig,
        extend: impl FnOnce(TrajectoryBatch<'a>) -> Result<TrajectoryBatch<'a>>,
    ) -> Result<MetricReport> {
        let mut metrics =
            TrajectoryMetrics::new(config.clone())?.with_parallelism(Parallelism::Sequential);
        metrics.update(&extend(self.host_batch()?)?)?;
        Ok(metrics.compute())
    }

    /// The report of the tensor path on flex.
    pub fn tensor(&self, config: &MetricsConfig) -> Result<MetricReport> {
        self.tensor_on::<Flex>(config, &Default::default())
    }

    /// The report of the tensor path on any backend's device.
    #[allow(dead_code)] // used by the wgpu tier only
    pub fn tensor_on<B: Backend>(
        &self,
        config: &MetricsConfig,
        device: &B::Device,
    ) -> Result<MetricReport> {
        let mut metrics = TrajectoryMetrics::new(config.clone())?;
        metrics.update(&self.tensor_batch_on::<B>(device)?)?;
        Ok(metrics.compute())
    }

    /// Both paths, asserted to agree; returns the host report.
    pub fn both(&self, config: &MetricsConfig) -> MetricReport {
        let host = self.host(config).expect("host path");
        let tensor = self.tensor(config).expect("tensor path");
        assert_reports_close(&host, &tensor, PATH_TOLERANCE);
        host
    }
}

/// Asserts two reports hold the same counts and values within `tolerance` (relative, floor 1).
pub fn assert_reports_close(left: &MetricReport, right: &MetricReport, tolerance: f64) {
    assert_eq!(left.horizons.len(), right.horizons.len());
    for (a, b) in left.horizons.iter().zip(&right.horizons) {
        assert_eq!(
            (a.units, a.ade_units, a.fde_units),
            (b.units, b.ade_units, b.fde_units),
            "counts differ:\n{left:#?}\n{right:#?}"
        );
        let pairs = [(a.ade, b.ade, "ade"), (a.fde, b.fde, "fde")];
        for (x, y, name) in pairs {
            assert_option_close(x, y, tolerance, name);
        }
        assert_eq!(a.last_step, b.last_step, "horizons differ");
        let ks = |report: &kiln_ml_metrics::HorizonReport| -> Vec<usize> {
            report.top_k.iter().map(|entry| entry.k).collect()
        };
        assert_eq!(ks(a), ks(b), "top-K entries differ:\n{left:#?}\n{right:#?}");
        for (x, y) in a.top_k.iter().zip(&b.top_k) {
            let fields = [
                (x.min_ade, y.min_ade, "min_ade"),
                (x.min_fde, y.min_fde, "min_fde"),
                (x.miss_rate, y.miss_rate, "miss_rate"),
                (x.brier_min_ade, y.brier_min_ade, "brier_min_ade"),
                (x.brier_min_fde, y.brier_min_fde, "brier_min_fde"),
                (x.p_min_ade, y.p_min_ade, "p_min_ade"),
                (x.p_min_fde, y.p_min_fde, "p_min_fde"),
                (x.p_miss_rate, y.p_miss_rate, "p_miss_rate"),
                (x.actor_miss_rate, y.actor_miss_rate, "actor_miss_rate"),
            ];
            for (x, y, name) in fields {
                assert_option_close(x, y, tolerance, name);
            }
        }
    }
}

fn assert_option_close(left: Option<f64>, right: Option<f64>, tolerance: f64, name: &str) {
    match (left, right) {
        (Some(l), Some(r)) => assert!(
            (l - r).abs() <= tolerance * l.abs().max(r.abs()).max(1.0),
            "{name}: {l} vs {r}"
        ),
        (l, r) => assert_eq!(l, r, "{name}"),
    }
}

/// Asserts `actual` is `Some` and within `tolerance` of `expected`.
/// numpy's `assert_allclose` with its defaults (relative 1e-7, absolute 0), as av2's tests
/// check.
pub fn assert_allclose(actual: Option<f64>, expected: f64) {
    let actual = actual.unwrap_or_else(|| panic!("expected {expected}, got None"));
    assert!(
        (actual - expected).abs() <= 1e-7 * expected.abs(),
        "expected {expected}, got {actual} (relative {:e})",
        (actual - expected).abs() / expected.abs()
    );
}

pub fn assert_close(actual: Option<f64>, expected: f64, tolerance: f64) {
    let actual = actual.unwrap_or_else(|| panic!("expected {expected}, got None"));
    assert!(
        (actual - expected).abs() <= tolerance,
        "expected {expected}, got {actual}"
    );
}
