//! One micro-batch (forward on the low-precision copy, scaled backward, accumulation) and the
//! epoch boundaries around it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::FloatDType;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Event, Phase, Position, PositionedBatches, StepReport, panic_message};

use crate::clipping::read_scalar;
use crate::grad_sync::all_reduce_counts;
use crate::{BatchOutcome, Error, LossNormalization, Result, TrainStep, Trainer, rng};

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
            self.epoch_metrics.start(self.epoch);
            self.observers
                .emit(&Event::EpochStart { epoch: self.epoch });
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
        // A replica checks the reduced loss at the step instead, together with the others: an
        // error here would leave them waiting in the all-reduce.
        if self.config.detect_anomalies && self.membership.is_none() {
            self.counters.readbacks += 1;
            let value = read_scalar(detached.clone(), "the anomaly check of the loss")?;
            if !value.is_finite() {
                return Err(Error::NonFiniteLoss {
                    step,
                    epoch: self.epoch,
                    micro_batch,
                    value,
                });
            }
        }

        let started = self.observers.start(Phase::Backward, step);
        let scaled = match self.loss_multiplier() {
            Some(multiplier) => loss.mul_scalar(multiplier),
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
    /// micro-batch count, or by all replicas' once joined); `None` when nothing is pending.
    ///
    /// In a data-parallel run every replica must call it together: the step runs when any
    /// replica has micro-batches pending (one all-reduce of the counts, read back).
    pub fn finish_window(&mut self) -> Result<Option<StepReport>> {
        let pending = match &self.membership {
            None => u64::from(self.window.micro_batches),
            Some(membership) => {
                self.counters.readbacks += 1;
                let [pending] = all_reduce_counts::<B::InnerBackend, 1>(
                    &membership.collective,
                    [u64::from(self.window.micro_batches)],
                    &self.device,
                )
                .map_err(|message| {
                    membership.error("the all-reduce of the pending micro-batches", message)
                })?;
                pending as u64
            }
        };
        if pending == 0 {
            Ok(None)
        } else {
            self.optimizer_step().map(Some)
        }
    }

    /// Records where the data stands after the batch just trained, and that batch's samples,
    /// from the epoch's batches: what a checkpoint saves to resume exactly.
    /// [`fit`](Self::fit) does this for you; a hand-written loop over
    /// [`train_batch`](Self::train_batch) calls it after each batch it trains on.
    pub fn record_position<I: PositionedBatches + ?Sized>(&mut self, batches: &I) {
        self.count_samples(batches.last_batch_samples());
        self.position = batches.position();
        self.data_key = batches.data_key().or(self.data_key);
    }

    /// Adds a trained batch's samples to the run and epoch counters.
    pub(crate) fn count_samples(&mut self, samples: u64) {
        self.counters.samples += samples;
        self.counters.epoch_samples += samples;
    }

    /// Ends the epoch: flushes the last partial window, emits [`Event::EpochEnd`] and moves
    /// the epoch and the position to the start of the next one. Returns the flushed step's
    /// report.
    pub fn end_epoch(&mut self) -> Result<Option<StepReport>> {
        self.start_epoch();
        let flushed = self.finish_window()?;
        self.close_epoch();
        Ok(flushed)
    }

    /// The rest of [`end_epoch`](Self::end_epoch) once the window is flushed: emits
    /// [`Event::EpochEnd`] and moves the epoch and the position to the next one.
    pub(crate) fn close_epoch(&mut self) {
        self.observers.emit(&Event::EpochEnd {
            epoch: self.epoch,
            steps: self.counters.epoch_steps,
            samples: self.counters.epoch_samples,
        });
        self.epoch += 1;
        self.position = Position::start_of(self.epoch);
        self.counters.epoch_steps = 0;
        self.counters.epoch_batches = 0;
        self.counters.epoch_samples = 0;
        self.epoch_started = false;
    }
}
