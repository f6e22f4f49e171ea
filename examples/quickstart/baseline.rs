//! The constant-velocity baseline: every player keeps the velocity of its last observed step.
//! It tells whether the model's minADE is good: the model must beat extrapolation.

use anyhow::Context;
use burn::tensor::backend::Backend;
use kiln_ml::core::Metric;
use kiln_ml::metrics::{BatchShape, MetricsConfig, TopKReport, TrajectoryBatch};

use crate::dataset::{FUTURE, HISTORY};
use crate::model::PlayerBatch;

/// Argoverse 2 metrics of the one-mode constant-velocity forecast over `batches`.
pub fn constant_velocity<B: Backend>(batches: &[PlayerBatch<B>]) -> anyhow::Result<TopKReport> {
    let mut metrics = MetricsConfig::argoverse2().init()?;
    for batch in batches {
        let history: Vec<f32> = batch.history.to_data().to_vec().map_err(anyhow_data)?;
        let truth: Vec<f32> = batch.future.to_data().to_vec().map_err(anyhow_data)?;
        let agents = history.len() / (2 * HISTORY);
        let mut forecast = Vec::with_capacity(agents * FUTURE * 2);
        for past in history.chunks_exact(2 * HISTORY) {
            let last = &past[2 * HISTORY - 2..];
            let before = &past[2 * HISTORY - 4..2 * HISTORY - 2];
            let velocity = [last[0] - before[0], last[1] - before[1]];
            for step in 1..=FUTURE {
                forecast.push(last[0] + velocity[0] * step as f32);
                forecast.push(last[1] + velocity[1] * step as f32);
            }
        }
        let shape = BatchShape::new(agents, 1, FUTURE);
        metrics.update(&TrajectoryBatch::new(shape, &forecast, &truth)?)?;
    }
    metrics
        .compute()
        .at(6)
        .copied()
        .context("the Argoverse 2 preset reports K = 6")
}

fn anyhow_data(error: burn::tensor::DataError) -> anyhow::Error {
    anyhow::anyhow!("reading a validation batch back: {error:?}")
}
