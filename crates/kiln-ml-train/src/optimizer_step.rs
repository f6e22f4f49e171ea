//! One optimizer step: unscale and normalize, read back where needed (then check for
//! inf/NaN), clip, step or skip; and the bound on how far the host runs ahead of the device.

use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, Transaction};
use kiln_ml_core::{Event, Phase, SkipReason, StepOutcome, StepReport};

use crate::clipping::{
    clip_coefficient, clip_factor_on_device, scale_grads, scale_grads_by, squared_grad_norm,
};
use crate::flat_step::BucketedGrads;
use crate::grad_sync::all_reduce_window;
use crate::step_hints::{self, StepHints};
use crate::trainer::LastLoss;
use crate::{Error, GradientClipping, LossNormalization, Result, TrainStep, Trainer};

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Unscale and normalize, read back where needed (then check for inf/NaN), clip, then step
    /// (and advance the scheduler) or skip (and leave it), update the loss scale, report.
    pub(crate) fn optimizer_step(&mut self) -> Result<StepReport> {
        let step = self.counters.optimizer_steps + 1;
        // Checked before the window is taken, so an error leaves it (and the phases) intact. A
        // replica checks the items of all replicas, after the all-reduce.
        if self.membership.is_none()
            && matches!(self.config.loss_normalization, LossNormalization::Items)
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
        let loss_scale = self.scaler.as_ref().map(|scaler| scaler.scale());
        let multiplier = self.loss_multiplier();
        let outcome = if let Some(membership) = self.membership.clone() {
            // Sums over every replica; normalized once the summed counts are read back.
            let reduced = all_reduce_window::<B, M>(
                self.model(),
                &membership.collective,
                window.grads,
                window.loss_sum,
                [u64::from(window.micro_batches), window.items],
                &self.device,
            )
            .map_err(|message| membership.error("the all-reduce of the gradients", message))?;
            self.settle_run_ahead()?;
            let divisor = Divisor::Reduced(reduced.counts);
            self.step_with_readback(step, reduced.grads, reduced.loss_sum, divisor, multiplier)?
        } else {
            let divisor = match self.config.loss_normalization {
                LossNormalization::MicroBatches => f64::from(window.micro_batches),
                LossNormalization::Items => window.items as f64,
            };
            let grads = window.grads.unwrap_or_default();
            let loss_sum = window
                .loss_sum
                .expect("an optimizer step runs only on a window with micro-batches");
            if self.reads_back(step) {
                self.settle_run_ahead()?;
                let divisor = Divisor::Known(divisor);
                self.step_with_readback(step, grads, loss_sum, divisor, multiplier)?
            } else {
                let unscale = 1.0 / (f64::from(multiplier.unwrap_or(1.0)) * divisor);
                let outcome = self.step_on_device(grads, loss_sum.clone(), divisor, unscale)?;
                self.bound_run_ahead(loss_sum)?;
                outcome
            }
        };

        let skipped = !matches!(outcome.outcome, StepOutcome::Applied);
        let scale_after = self.scaler.as_mut().map(|scaler| scaler.update(skipped));
        if let Some(warning) = self.monitor.record(skipped, scale_after) {
            log::warn!("kiln-ml-train: at optimizer step {step}: {warning}");
        }

        self.counters.optimizer_steps = step;
        self.counters.epoch_steps += 1;
        if skipped {
            self.counters.skipped_steps += 1;
        } else {
            self.counters.applied_steps += 1;
            self.update_ema();
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

    /// What each micro-batch's loss is multiplied by before its backward pass under f16:
    /// the scale over the configured window size, PyTorch's `scaler.scale(loss / K)`, so the
    /// scale settles where PyTorch's does. The step unscales by `1 / (multiplier * divisor)`
    /// with the window's real divisor, which gives the same normalization for a short last
    /// window or an item count. The value is the f32 the loss is multiplied by, so the unscale
    /// undoes exactly what the backward pass saw. `None` without a loss scaler.
    pub(crate) fn loss_multiplier(&self) -> Option<f32> {
        let window = self.config.accumulation_steps as f32;
        self.scaler.as_ref().map(|scaler| scaler.scale() / window)
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

    /// An optimizer step that reads loss and gradient norm (and, for a replica, the summed
    /// counts) back in one transaction, skips the step when either is not finite, and clips
    /// with a coefficient computed on the host.
    fn step_with_readback(
        &mut self,
        step: u64,
        mut grads: GradientsParams,
        loss_sum: Tensor<B::InnerBackend, 1>,
        divisor: Divisor<B>,
        loss_multiplier: Option<f32>,
    ) -> Result<Outcome> {
        let needs_norm = self.scaler.is_some()
            || matches!(self.config.clipping, Some(GradientClipping::Norm { .. }))
            || self.config.detect_anomalies
            || self.config.track_grad_norm;
        // A fused optimizer (clipping by norm or not at all) gets its gradients already in its
        // buckets, their norm one reduction per bucket; any other, a norm tensor by tensor.
        let bucketed = (needs_norm
            && self.takes_hints()
            && !matches!(self.config.clipping, Some(GradientClipping::Value { .. })))
        .then(|| BucketedGrads::take::<B, M>(self.model(), &mut grads))
        .flatten();
        let squared = match &bucketed {
            Some(bucketed) => Some(bucketed.squared_norm()),
            None if needs_norm => squared_grad_norm::<B, M>(self.model(), &grads),
            None => None,
        };
        let counts = match &divisor {
            Divisor::Known(_) => None,
            Divisor::Reduced(counts) => Some(counts.clone()),
        };
        self.counters.readbacks += 1;
        let read = read_back([Some(loss_sum), squared, counts])?;
        let loss_sum = read[0].as_ref().map_or(f64::NAN, |values| values[0]);
        let squared_scaled = read[1].as_ref().map(|values| values[0]);
        let divisor = match (&divisor, &read[2]) {
            (Divisor::Known(divisor), _) => *divisor,
            (Divisor::Reduced(_), Some(counts)) => {
                let (micro_batches, items) = (counts[0], counts[1]);
                match self.config.loss_normalization {
                    LossNormalization::MicroBatches => micro_batches,
                    LossNormalization::Items if items > 0.0 => items,
                    LossNormalization::Items => {
                        return Err(Error::NoItems {
                            step,
                            micro_batches: micro_batches as u32,
                        });
                    }
                }
            }
            (Divisor::Reduced(_), None) => unreachable!("the counts were read back"),
        };
        let unscale = 1.0 / (f64::from(loss_multiplier.unwrap_or(1.0)) * divisor);
        let loss = loss_sum / divisor;
        self.last_loss = Some(LastLoss::Read(loss));
        let grad_norm = squared_scaled.map(|squared| squared.sqrt() * unscale);
        // The loss is read back anyway, so checking it is free; the gradients are checked
        // through their norm whenever it is computed.
        let finite = loss.is_finite() && squared_scaled.is_none_or(f64::is_finite);

        if !finite {
            // Under f16-mixed, overflowing gradients are the loss scaler's signal; a non-finite
            // loss is not (on one device it already stopped at its micro-batch; a replica
            // checks the reduced loss here, with the others).
            if self.config.detect_anomalies && (self.scaler.is_none() || !loss.is_finite()) {
                return Err(Error::NonFiniteGradients {
                    step,
                    epoch: self.epoch,
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
        let hints = if self.takes_hints() && max_abs.is_none() {
            // A fused optimizer multiplies the gradients in its own pass.
            StepHints {
                factor,
                max_norm: None,
                generation: self.model_generation,
            }
        } else {
            scale_grads::<B, M>(&model, &mut grads, factor, max_abs);
            StepHints::nothing(self.model_generation)
        };
        let learning_rate = self.scheduler.step();
        self.step_optimizer(learning_rate, model, grads, hints, bucketed)?;
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
    ) -> Result<Outcome> {
        let model = self
            .model
            .take()
            .expect("the model is present between steps");
        let generation = self.model_generation;
        let hints = match self.config.clipping {
            // A fused optimizer unscales and clips in its own pass: one reduction over its
            // gradient buckets, the coefficient applied on the device.
            Some(GradientClipping::Norm { max_norm }) if self.takes_hints() => StepHints {
                factor: unscale,
                max_norm: Some(max_norm),
                generation,
            },
            None if self.takes_hints() => StepHints {
                factor: unscale,
                max_norm: None,
                generation,
            },
            Some(GradientClipping::Norm { max_norm }) => {
                if let Some(squared) = squared_grad_norm::<B, M>(&model, &grads) {
                    let factor = clip_factor_on_device(squared, unscale, max_norm);
                    scale_grads_by::<B, M>(&model, &mut grads, factor);
                }
                StepHints::nothing(generation)
            }
            Some(GradientClipping::Value { max_abs }) => {
                scale_grads::<B, M>(&model, &mut grads, unscale, Some(max_abs));
                StepHints::nothing(generation)
            }
            None => {
                scale_grads::<B, M>(&model, &mut grads, unscale, None);
                StepHints::nothing(generation)
            }
        };
        let learning_rate = self.scheduler.step();
        self.step_optimizer(learning_rate, model, grads, hints, None)?;
        self.last_loss = Some(LastLoss::OnDevice(loss_sum.div_scalar(divisor)));
        Ok(Outcome {
            outcome: StepOutcome::Applied,
            learning_rate,
            loss: None,
            grad_norm: None,
        })
    }

    /// Whether the optimizer takes the trainer's step hints: a kiln fused optimizer, which
    /// then unscales and clips the gradients itself.
    fn takes_hints(&self) -> bool {
        self.fused_optimizer == Some(true)
    }

    /// Steps the optimizer with `hints` offered (see `step_hints`), and `bucketed`, the
    /// gradients already laid out in its buckets (they have left `grads`), and learns from
    /// whether it took them which kind of optimizer it is. The model is back in place on every
    /// path.
    fn step_optimizer(
        &mut self,
        learning_rate: f64,
        model: M,
        grads: GradientsParams,
        hints: StepHints,
        bucketed: Option<BucketedGrads<B::InnerBackend>>,
    ) -> Result<()> {
        let delegated = bucketed.is_some() || hints != StepHints::nothing(hints.generation);
        step_hints::offer(hints, bucketed);
        self.model = Some(self.optim.step(learning_rate, model, grads));
        let taken = step_hints::withdraw();
        if delegated && !taken {
            self.fused_optimizer = Some(false);
            return Err(Error::InvalidConfig {
                field: "optimizer",
                value: "an optimizer that took the trainer's gradient scaling before".to_owned(),
                reason: "it did not take it at this step, which was applied without unscaling \
                         or clipping (or without gradients, if they were bucketed); a fused kiln \
                         optimizer must stay one for the whole run"
                    .to_owned(),
            });
        }
        self.fused_optimizer = Some(taken);
        Ok(())
    }

    /// Waits for the steps queued before a readback (which waits for them anyway).
    fn settle_run_ahead(&mut self) -> Result<()> {
        self.run_ahead.settle().map_err(|message| Error::Device {
            during: "the wait for the queued steps before a readback",
            message,
        })
    }

    /// Records the step just queued (its loss sum tells when it ended) and, once
    /// `max_queued_steps` steps are queued past the last one known finished, waits for the
    /// oldest read within the bound: the device keeps the later steps queued (see
    /// [`RunAhead`](crate::run_ahead::RunAhead)).
    fn bound_run_ahead(&mut self, loss_sum: Tensor<B::InnerBackend, 1>) -> Result<()> {
        let waited = self
            .run_ahead
            .queued(loss_sum, self.config.max_queued_steps)
            .map_err(|message| Error::Device {
                during: "the run-ahead bound's wait for an earlier step",
                message,
            })?;
        if waited {
            self.counters.lagged_waits += 1;
        }
        Ok(())
    }
}

/// What an optimizer step did, before the counters and the scaler are updated.
struct Outcome {
    outcome: StepOutcome,
    learning_rate: f64,
    loss: Option<f64>,
    grad_norm: Option<f64>,
}

/// What normalizes a window: known on the host, or the summed `[micro-batches, items]` of
/// every replica, still on the device.
enum Divisor<B: AutodiffBackend> {
    Known(f64),
    Reduced(Tensor<B::InnerBackend, 1>),
}

/// Reads the given tensors back in one transaction (the step's single host sync): the values of
/// each, `None` where none was given.
fn read_back<B: burn::tensor::backend::Backend, const N: usize>(
    tensors: [Option<Tensor<B, 1>>; N],
) -> Result<[Option<Vec<f64>>; N]> {
    let during = "the optimizer step's readback of loss and gradient norm";
    let present: Vec<bool> = tensors.iter().map(Option::is_some).collect();
    let mut transaction = Transaction::default();
    for tensor in tensors.into_iter().flatten() {
        transaction = transaction.register(tensor);
    }
    let mut data = transaction
        .try_execute()
        .map_err(|error| Error::Device {
            during,
            message: format!("{error:?}"),
        })?
        .into_iter();
    let mut values: [Option<Vec<f64>>; N] = std::array::from_fn(|_| None);
    for (index, given) in present.into_iter().enumerate() {
        if !given {
            continue;
        }
        let read: Vec<f64> = data
            .next()
            .map(|data| data.iter::<f64>().collect())
            .unwrap_or_default();
        if read.is_empty() {
            return Err(Error::Device {
                during,
                message: format!("the device returned no value for readback {index}"),
            });
        }
        values[index] = Some(read);
    }
    Ok(values)
}
