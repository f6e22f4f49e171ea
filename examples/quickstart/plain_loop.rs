//! The quickstart's training in a hand-written Burn loop, without kiln-ml-train
//! (`--trainer plain-burn`): the baseline kiln's `Trainer` is measured against on the same
//! model, batches, loss, Adam, cosine schedule and device.
//!
//! It is the loop a Burn user writes: forward, loss, backward, `optim.step`, one loss
//! readback per epoch. f32 only (mixed precision by hand is what kiln-ml-train is for). Clipping
//! is Burn's own (`GradientClippingConfig::Norm` on the optimizer), which clips each tensor's
//! norm where kiln clips the global norm: the same kernels per tensor, without kiln's final sum.
//! Validation runs kiln-ml-metrics on the same batches, as the kiln path does.

use std::time::{Duration, Instant};

use anyhow::Context;
use burn::lr_scheduler::LrScheduler;
use burn::module::AutodiffModule;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::core::Metric;
use kiln_ml::metrics::{TensorTrajectoryBatch, TrajectoryMetrics};
use kiln_ml::train::EpochSummary;

use crate::model::{Forecaster, PlayerBatch};
use crate::{EpochFigures, epoch_figures};

/// What the hand-written loop did.
pub struct PlainRun {
    /// The figures of every epoch.
    pub figures: Vec<EpochFigures>,
    /// From the start of training to the end of the first step on the device.
    pub time_to_first_step: Option<Duration>,
}

/// Trains `model` for `epochs` epochs on the batches `open(epoch)` yields, validating on
/// `valid` after each; `on_epoch` sees each epoch's figures as they come.
#[allow(clippy::too_many_arguments)]
pub fn train<B, I, E>(
    mut model: Forecaster<B>,
    mut scheduler: impl LrScheduler,
    max_norm: f32,
    epochs: u64,
    mut open: impl FnMut(u64) -> anyhow::Result<I>,
    valid: &[PlayerBatch<B::InnerBackend>],
    metrics: &mut TrajectoryMetrics,
    device: &B::Device,
    mut on_epoch: impl FnMut(&EpochFigures),
) -> anyhow::Result<PlainRun>
where
    B: AutodiffBackend,
    I: Iterator<Item = Result<PlayerBatch<B>, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut optim = AdamConfig::new()
        .with_grad_clipping(Some(GradientClippingConfig::Norm(max_norm)))
        .init();
    let started = Instant::now();
    let mut time_to_first_step = None;
    let mut figures = Vec::new();
    for epoch in 0..epochs {
        let epoch_started = Instant::now();
        let (mut waited, mut samples, mut steps) = (Duration::ZERO, 0u64, 0u64);
        let mut last_loss = None;
        let mut batches = open(epoch)?;
        loop {
            let wait_started = Instant::now();
            let next = batches.next();
            waited += wait_started.elapsed();
            let Some(batch) = next else { break };
            let batch = batch.with_context(|| format!("reading a batch of epoch {epoch}"))?;
            samples += batch.history.dims()[0] as u64;
            steps += 1;
            let loss = model.loss(batch);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(scheduler.step(), model, grads);
            last_loss = Some(loss.detach());
            if time_to_first_step.is_none() {
                B::sync(device).map_err(|error| anyhow::anyhow!("device sync: {error:?}"))?;
                time_to_first_step = Some(started.elapsed());
            }
        }
        // The device finishes the epoch's queued steps before its time is taken.
        B::sync(device).map_err(|error| anyhow::anyhow!("device sync: {error:?}"))?;
        let elapsed = epoch_started.elapsed();
        let train_loss = match last_loss {
            Some(loss) => loss.into_scalar().to_string().parse::<f64>()?,
            None => f64::NAN,
        };
        Metric::<TensorTrajectoryBatch<B::InnerBackend>>::reset(metrics);
        let inference = model.valid();
        for batch in valid {
            metrics.update(&inference.predict(batch.clone()))?;
        }
        let summary = EpochSummary {
            epoch,
            steps,
            samples,
            elapsed,
            data_wait: waited,
        };
        let report = Metric::<TensorTrajectoryBatch<B::InnerBackend>>::compute(metrics);
        let row = epoch_figures(&summary, train_loss, &report);
        on_epoch(&row);
        figures.push(row);
    }
    Ok(PlainRun {
        figures,
        time_to_first_step,
    })
}
