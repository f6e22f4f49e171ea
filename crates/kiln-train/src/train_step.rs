//! One micro-batch (forward, backward, accumulate) and one optimizer step (unscale, check,
//! clip, step or skip), with a host readback only where one is needed.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{FloatDType, Tensor, Transaction};
use kiln_core::{Event, Phase, SkipReason, StepOutcome, StepReport};

use crate::clipping::{
    clip_coefficient, clip_factor_on_device, read_scalar, scale_grads, scale_grads_by,
    squared_grad_norm,
};
use crate::trainer::LastLoss;
use crate::{
    BatchOutcome, Error, GradientClipping, LossNormalization, Result, TrainStep, Trainer, rng,
};

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Emits [`Event::EpochStart`] for the current epoch unless it was already emitted.
    /// [`train_batch`](Self::train_batch) calls it for you.
    pub fn start_epoch(&mut self) {
        if !self.epoch_started {
            self.epoch_started = true;
            self.observers.emit(&Event::EpochStart {
                epoch: self.position.epoch,
            });
        }
    }

    /// Trains on one micro-batch: forward (on a low-precision copy under mixed precision),
    /// scaled backward, and accumulation of the f32 gradients. When the micro-batch completes a
    /// window of [`accumulation_steps`](crate::TrainerConfig::accumulation_steps), the optimizer
    /// step runs too and its report is returned.
    pub fn train_batch(&mut self, batch: M::Input) -> Result<BatchOutcome<M::Output>> {
        self.start_epoch();
        let step = self.counters.optimizer_steps + 1;
        let micro_batch = self.window.micro_batches;
        if micro_batch == 0 && self.config.reseed_every_step {
            B::seed(&self.device, rng::step_seed(self.config.seed, step));
        }
        let model = self.model();
        let samples = model.batch_samples(&batch);

        let started = self.observers.start(Phase::HostToDevice, step);
        let batch = model.to_device(batch, &self.device);
        self.observers.end::<B>(started, &self.device)?;

        let started = self.observers.start(Phase::Forward, step);
        let output = match &self.cast_plan {
            Some(plan) => {
                let copy = plan.cast(model.clone(), self.autocast.compute_dtype());
                let autocast = self.autocast;
                // Burn panics on mixed dtypes; under mixed precision that usually means a layer
                // kept in f32 got a low-precision input, which the error can explain.
                catch_unwind(AssertUnwindSafe(|| copy.step(batch, &autocast))).map_err(|panic| {
                    Error::ForwardPanicked {
                        step,
                        micro_batch,
                        precision: autocast.precision(),
                        message: panic_message(panic.as_ref()),
                    }
                })
            }
            None => Ok(model.step(batch, &self.autocast)),
        };
        // End the phase before any check can return, so observers never see it left open.
        self.observers.end::<B>(started, &self.device)?;
        let output = output?;
        let shape = output.loss.dims();
        if shape != [1] {
            return Err(Error::LossShape {
                step,
                micro_batch,
                shape: shape.to_vec(),
            });
        }
        let items = match (self.config.loss_normalization, output.items) {
            (LossNormalization::Items, None) => {
                return Err(Error::MissingItemCount { step, micro_batch });
            }
            (_, items) => items.unwrap_or(0),
        };
        let loss = output.loss.cast(FloatDType::F32);

        let detached = loss.clone().detach().inner();
        if self.config.detect_anomalies {
            self.counters.readbacks += 1;
            let value = read_scalar(detached.clone(), "the anomaly check of the loss")?;
            if !value.is_finite() {
                return Err(Error::NonFiniteLoss {
                    step,
                    epoch: self.position.epoch,
                    micro_batch,
                    value,
                });
            }
        }

        let started = self.observers.start(Phase::Backward, step);
        let scaled = match &self.scaler {
            Some(scaler) => loss.mul_scalar(scaler.scale()),
            None => loss,
        };
        let grads = GradientsParams::from_grads(scaled.backward(), self.model());
        self.observers.end::<B>(started, &self.device)?;

        let model = self
            .model
            .as_ref()
            .expect("the model is present between steps");
        self.window.add(model, grads, detached, items);
        self.counters.micro_batches += 1;
        self.counters.epoch_batches += 1;
        self.counters.samples += samples;
        // Positions count the global order: every rank consumed as many samples as this one.
        self.position.consumed += samples * u64::from(self.config.data_world_size);

        let step_report = if self.window.micro_batches >= self.config.accumulation_steps {
            Some(self.optimizer_step()?)
        } else {
            None
        };
        Ok(BatchOutcome {
            output: output.item,
            step: step_report,
        })
    }

    /// Runs the optimizer step for a partially filled window now (normalized by its own
    /// micro-batch count); `None` when nothing is pending.
    pub fn finish_window(&mut self) -> Result<Option<StepReport>> {
        if self.window.is_empty() {
            Ok(None)
        } else {
            self.optimizer_step().map(Some)
        }
    }

    /// Ends the epoch: flushes the last partial window, emits [`Event::EpochEnd`] and moves
    /// the position to the start of the next epoch. Returns the flushed step's report.
    pub fn end_epoch(&mut self) -> Result<Option<StepReport>> {
        self.start_epoch();
        let flushed = self.finish_window()?;
        self.observers.emit(&Event::EpochEnd {
            epoch: self.position.epoch,
            steps: self.counters.epoch_steps,
            samples: self.position.consumed,
        });
        self.position = kiln_core::Position::start_of(self.position.epoch + 1);
        self.counters.epoch_steps = 0;
        self.counters.epoch_batches = 0;
        self.epoch_started = false;
        Ok(flushed)
    }

    /// Unscale and normalize, read back where needed (then check for inf/NaN), clip, then step
    /// (and advance the scheduler) or skip (and leave it), update the loss scale, report.
    fn optimizer_step(&mut self) -> Result<StepReport> {
        let step = self.counters.optimizer_steps + 1;
        // Checked before the window is taken, so an error leaves it (and the phases) intact.
        if matches!(self.config.loss_normalization, LossNormalization::Items)
            && self.window.items == 0
        {
            return Err(Error::NoItems {
                step,
                micro_batches: self.window.micro_batches,
            });
        }
        let started = self.observers.start(Phase::Optimizer, step);
        let result = self.apply_window(step);
        // Closed on every path, failures included, so observers never see the phase left open.
        let ended = self.observers.end::<B>(started, &self.device);
        let report = result?;
        ended?;
        self.observers.emit(&Event::Step(report));
        Ok(report)
    }

    /// The body of [`optimizer_step`](Self::optimizer_step), inside its Optimizer phase.
    fn apply_window(&mut self, step: u64) -> Result<StepReport> {
        let window = std::mem::take(&mut self.window);
        let divisor = match self.config.loss_normalization {
            LossNormalization::MicroBatches => f64::from(window.micro_batches),
            LossNormalization::Items => window.items as f64,
        };
        let loss_scale = self.scaler.as_ref().map(|scaler| scaler.scale());
        let unscale = 1.0 / (f64::from(loss_scale.unwrap_or(1.0)) * divisor);
        let grads = window.grads.unwrap_or_default();
        let loss_sum = window
            .loss_sum
            .expect("an optimizer step runs only on a window with micro-batches");
        let outcome = if self.reads_back(step) {
            self.queued_steps = 0;
            self.step_with_readback(step, grads, loss_sum, divisor, unscale)?
        } else {
            let outcome = self.step_on_device(grads, loss_sum, divisor, unscale);
            self.bound_run_ahead()?;
            outcome
        };

        let skipped = !matches!(outcome.outcome, StepOutcome::Applied);
        let scale_after = self.scaler.as_mut().map(|scaler| scaler.update(skipped));
        if let Some(warning) = self.monitor.record(skipped, scale_after) {
            log::warn!("kiln-train: at optimizer step {step}: {warning}");
        }

        self.counters.optimizer_steps = step;
        self.counters.epoch_steps += 1;
        if skipped {
            self.counters.skipped_steps += 1;
        } else {
            self.counters.applied_steps += 1;
        }
        Ok(StepReport {
            step,
            outcome: outcome.outcome,
            loss: outcome.loss,
            loss_scale: loss_scale.map(f64::from),
            grad_norm: outcome.grad_norm,
            learning_rate: outcome.learning_rate,
        })
    }

    /// Whether this optimizer step reads loss (and gradient norm) back to the host: every f16
    /// step (the loss scaler must know whether the gradients are finite), every step when
    /// anomalies are checked or the norm is tracked, and every `read_loss_every` steps.
    fn reads_back(&self, step: u64) -> bool {
        let every = self.config.read_loss_every;
        self.scaler.is_some()
            || self.config.detect_anomalies
            || self.config.track_grad_norm
            || (every > 0 && step.is_multiple_of(every))
    }

    /// An optimizer step that reads loss and gradient norm back in one transaction, skips the
    /// step when either is not finite, and clips with a coefficient computed on the host.
    fn step_with_readback(
        &mut self,
        step: u64,
        mut grads: GradientsParams,
        loss_sum: Tensor<B::InnerBackend, 1>,
        divisor: f64,
        unscale: f64,
    ) -> Result<Outcome> {
        let needs_norm = self.scaler.is_some()
            || matches!(self.config.clipping, Some(GradientClipping::Norm { .. }))
            || self.config.detect_anomalies
            || self.config.track_grad_norm;
        let squared = if needs_norm {
            squared_grad_norm::<B, M>(self.model(), &grads)
        } else {
            None
        };
        self.counters.readbacks += 1;
        let (loss_sum, squared_scaled) = read_back(loss_sum, squared)?;
        let loss = loss_sum / divisor;
        self.last_loss = Some(LastLoss::Read(loss));
        let grad_norm = squared_scaled.map(|squared| squared.sqrt() * unscale);
        // The loss is read back anyway, so checking it is free; the gradients are checked
        // through their norm whenever it is computed.
        let finite = loss.is_finite() && squared_scaled.is_none_or(f64::is_finite);

        if !finite {
            if self.scaler.is_none() && self.config.detect_anomalies {
                return Err(Error::NonFiniteGradients {
                    step,
                    epoch: self.position.epoch,
                    squared_norm: squared_scaled.unwrap_or(f64::NAN),
                });
            }
            // The scheduler must not advance: report the rate it would have given.
            return Ok(Outcome {
                outcome: StepOutcome::Skipped(SkipReason::NonFiniteGradients),
                learning_rate: self.scheduler.clone().step(),
                loss: Some(loss),
                grad_norm,
            });
        }
        let (factor, max_abs) = match self.config.clipping {
            Some(GradientClipping::Norm { max_norm }) => (
                unscale * clip_coefficient(grad_norm.unwrap_or(0.0), max_norm),
                None,
            ),
            Some(GradientClipping::Value { max_abs }) => (unscale, Some(max_abs)),
            None => (unscale, None),
        };
        let model = self
            .model
            .take()
            .expect("the model is present between steps");
        scale_grads::<B, M>(&model, &mut grads, factor, max_abs);
        let learning_rate = self.scheduler.step();
        self.model = Some(self.optim.step(learning_rate, model, grads));
        Ok(Outcome {
            outcome: StepOutcome::Applied,
            learning_rate,
            loss: Some(loss),
            grad_norm,
        })
    }

    /// An optimizer step queued without waiting for the device: norm clipping's coefficient is
    /// a device tensor, the loss stays on the device until asked for, and the step is applied
    /// (as PyTorch does outside f16: no finiteness check without a readback).
    fn step_on_device(
        &mut self,
        mut grads: GradientsParams,
        loss_sum: Tensor<B::InnerBackend, 1>,
        divisor: f64,
        unscale: f64,
    ) -> Outcome {
        let model = self
            .model
            .take()
            .expect("the model is present between steps");
        match self.config.clipping {
            Some(GradientClipping::Norm { max_norm }) => {
                if let Some(squared) = squared_grad_norm::<B, M>(&model, &grads) {
                    let factor = clip_factor_on_device(squared, unscale, max_norm);
                    scale_grads_by::<B, M>(&model, &mut grads, factor);
                }
            }
            Some(GradientClipping::Value { max_abs }) => {
                scale_grads::<B, M>(&model, &mut grads, unscale, Some(max_abs));
            }
            None => scale_grads::<B, M>(&model, &mut grads, unscale, None),
        }
        let learning_rate = self.scheduler.step();
        self.model = Some(self.optim.step(learning_rate, model, grads));
        self.last_loss = Some(LastLoss::OnDevice(loss_sum.div_scalar(divisor)));
        Outcome {
            outcome: StepOutcome::Applied,
            learning_rate,
            loss: None,
            grad_norm: None,
        }
    }
}

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Waits for the device once `max_queued_steps` steps were queued without a readback.
    fn bound_run_ahead(&mut self) -> Result<()> {
        self.queued_steps += 1;
        let limit = self.config.max_queued_steps;
        if limit == 0 || self.queued_steps < limit {
            return Ok(());
        }
        self.queued_steps = 0;
        self.counters.device_waits += 1;
        B::sync(&self.device).map_err(|error| Error::Device {
            during: "the run-ahead bound's device sync",
            message: format!("{error:?}"),
        })
    }
}

/// What an optimizer step did, before the counters and the scaler are updated.
struct Outcome {
    outcome: StepOutcome,
    learning_rate: f64,
    loss: Option<f64>,
    grad_norm: Option<f64>,
}

/// The text of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Reads the window's loss sum and, when computed, the squared gradient norm in one
/// transaction: the step's single host sync.
fn read_back<B: burn::tensor::backend::Backend>(
    loss_sum: burn::tensor::Tensor<B, 1>,
    squared: Option<burn::tensor::Tensor<B, 1>>,
) -> Result<(f64, Option<f64>)> {
    let during = "the optimizer step's readback of loss and gradient norm";
    let with_norm = squared.is_some();
    let mut transaction = Transaction::default().register(loss_sum);
    if let Some(squared) = squared {
        transaction = transaction.register(squared);
    }
    let data = transaction.try_execute().map_err(|error| Error::Device {
        during,
        message: format!("{error:?}"),
    })?;
    let value = |index: usize| {
        data.get(index)
            .and_then(|data| data.iter::<f64>().next())
            .ok_or_else(|| Error::Device {
                during,
                message: format!("the device returned no value for readback {index}"),
            })
    };
    Ok((value(0)?, with_norm.then(|| value(1)).transpose()?))
}
