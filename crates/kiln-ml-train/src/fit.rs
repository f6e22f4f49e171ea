//! `fit`: the whole loop over epochs, with data waits timed, checkpoints and limits.

use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Event, Fingerprint, Phase, Position, PositionedBatches};

use crate::callback::{CheckpointWriter, Decision, EpochContext};
use crate::first_step::FirstStepWatch;
use crate::grad_sync::all_reduce_counts;
use crate::{EpochSummary, Error, FitSummary, Result, TrainStep, Trainer};

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Trains from the current [`position`](Self::position) to the end of
    /// [`num_epochs`](crate::TrainerConfig::num_epochs).
    ///
    /// `data` is called once per epoch with the position to start from (the start of the epoch,
    /// or the middle after [`load_checkpoint`](Self::load_checkpoint)) and opens that epoch's
    /// remaining batches as a [`PositionedBatches`]: a kiln-ml-data loader's `resume_epoch`, or
    /// any iterator wrapped in [`PlainBatches`](kiln_ml_core::PlainBatches), which skips to the
    /// position itself. The trainer saves the position the batches report, so resume is exact
    /// in either case. An error opening an epoch or reading a batch stops training with
    /// [`Error::Data`] naming the epoch and batch.
    pub fn fit<D, I, E>(&mut self, data: D) -> Result<FitSummary>
    where
        D: FnMut(Position) -> std::result::Result<I, E>,
        I: PositionedBatches<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.fit_with(data, |_, _| Ok(()))
    }

    /// [`fit`](Self::fit) with a closure after every epoch (validation, logging), given the
    /// trainer and what the epoch did. Metrics it logs with [`log_metric`](Self::log_metric)
    /// go to the observers and to the [callbacks](Self::add_callback), which run after it and
    /// can stop training ([`EarlyStopping`](crate::EarlyStopping)) or keep checkpoints of
    /// their own ([`BestCheckpoints`](crate::BestCheckpoints)). An epoch a callback stops
    /// after still writes its checkpoint, and the summary says
    /// [`stopped_early`](FitSummary::stopped_early).
    ///
    /// The time from this call to the end of its first optimizer step is measured (the device
    /// synced once there) and reported in [`FitSummary::time_to_first_step`], to observers as
    /// [`Event::FirstStep`], and by [`time_to_first_step`](Self::time_to_first_step); while it
    /// runs longer than [`first_step_notice_seconds`](crate::TrainerConfig::first_step_notice_seconds),
    /// a notice on stderr says what is known.
    pub fn fit_with<D, I, E, F>(&mut self, data: D, on_epoch_end: F) -> Result<FitSummary>
    where
        D: FnMut(Position) -> std::result::Result<I, E>,
        I: PositionedBatches<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
        F: FnMut(&mut Self, &EpochSummary) -> Result<()>,
    {
        let notice = self.config.first_step_notice_seconds;
        let notice = (notice > 0.0).then(|| Duration::from_secs_f64(notice));
        self.time_to_first_step = None;
        // The backend's name says what the device's Debug form does not (`Cpu` is lavapipe on wgpu).
        let device = format!("{} {:?}", B::name(&self.device), self.device);
        let watch = FirstStepWatch::start(notice, device);
        self.observers.watch_first_step(watch);
        let result = self.fit_epochs(data, on_epoch_end);
        // Stops the watcher on every path, errors included.
        self.observers.take_first_step();
        result
    }

    /// The body of [`fit_with`](Self::fit_with), inside its first-step watch.
    fn fit_epochs<D, I, E, F>(&mut self, mut data: D, mut on_epoch_end: F) -> Result<FitSummary>
    where
        D: FnMut(Position) -> std::result::Result<I, E>,
        I: PositionedBatches<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
        F: FnMut(&mut Self, &EpochSummary) -> Result<()>,
    {
        let mut reached_max_steps = false;
        let mut stopped_early = None;
        let mut diverged = false;
        let steps_before_fit = self.counters.optimizer_steps;
        self.check_same_start()?;
        self.callback_states.hand_out(&mut self.callbacks)?;
        // Before the first step: a rolled-back run that dies before its first checkpoint then
        // resumes from the file it rolled back to, not from the abandoned newest.
        self.set_aside_abandoned_checkpoints()?;
        while self.epoch < self.config.num_epochs {
            let epoch = self.epoch;
            // An epoch a checkpoint was taken in (after its last batch, say) is opened again
            // whatever `max_steps` says: `train_epoch` then stops at the limit, or runs the
            // epoch's end when no batch is left, as the run that wrote the checkpoint did.
            let resumed_in_epoch = self.position.epoch > epoch
                || (self.position.epoch == epoch && self.position.consumed > 0);
            if self.max_steps_reached() && !resumed_in_epoch {
                reached_max_steps = true;
                break;
            }
            self.start_epoch();
            let mut summary = EpochSummary {
                epoch,
                ..EpochSummary::default()
            };
            let started = Instant::now();
            let steps_before = self.counters.optimizer_steps;
            // A checkpoint taken after the epoch's last batch already points at the next
            // epoch: only the end of this one is left to run.
            if self.position.epoch == epoch {
                reached_max_steps = self.train_epoch(&mut data, &mut summary)?;
            }
            if reached_max_steps {
                break;
            }
            // The flushed last window may be the fit's first step, and a step the checkpoint
            // schedule names: written before the epoch closes, as the epoch's other steps are,
            // so a resume from it still runs the epoch's end (validation, callbacks).
            self.start_epoch();
            if self.finish_window()?.is_some() {
                self.note_first_step()?;
                self.checkpoint_if_due()?;
            }
            self.close_epoch();
            summary.steps = self.counters.optimizer_steps - steps_before;
            // The steps still queued on the device are this epoch's time, not the validation's
            // or the next epoch's: one wait per epoch, so the time compares with a loop that
            // syncs at its end.
            if summary.steps > 0 {
                crate::observers::sync::<B>(&self.device, "the device sync at an epoch's end")?;
            }
            summary.elapsed = started.elapsed();
            // After the callback, so what it draws from the host RNG is in the checkpoint.
            on_epoch_end(self, &summary)?;
            let decision = self.run_callbacks(&summary)?;
            let decision = self.agree_on(decision)?;
            // A stopped run writes its last checkpoint whatever the schedule, as does one a
            // callback asked for; a diverged one writes none, so pruning keeps the good ones.
            if decision.diverged {
                log::warn!(
                    "kiln-ml-train: training diverged after epoch {epoch}: stopping without \
                     writing its checkpoint"
                );
            } else if decision.stop || decision.checkpoint {
                self.write_scheduled_checkpoint()?;
            } else {
                self.checkpoint_epoch_end_if_due(summary.steps)?;
            }
            self.observers.emit(&Event::EpochClosed { epoch });
            if decision.stop || decision.diverged {
                diverged = decision.diverged;
                stopped_early = Some(epoch);
                break;
            }
        }
        // The last epoch may have ended on the step `max_steps` names.
        reached_max_steps |= self.max_steps_reached();
        // A run that trained up to `max_steps` ends with its state on disk, whatever the
        // schedule (as Lightning's checkpoint callback saves when training stops), unless that
        // step's checkpoint is already there, or the run diverged on it.
        let step = self.counters.optimizer_steps;
        if reached_max_steps
            && !diverged
            && step > steps_before_fit
            && self.last_scheduled_checkpoint != Some(step)
        {
            self.write_scheduled_checkpoint()?;
        }
        // The one readback `fit` adds: the summary's loss, once per call.
        let last_loss = self.last_loss()?;
        Ok(FitSummary {
            counters: self.counters,
            position: self.position,
            last_loss,
            reached_max_steps,
            stopped_early,
            time_to_first_step: self.time_to_first_step,
        })
    }

    /// Runs the callbacks on the epoch that just ended, those that keep checkpoints of their
    /// own last; returns what any of them asked for. Every callback runs (each keeps its own
    /// state), whatever an earlier one decided.
    fn run_callbacks(&mut self, summary: &EpochSummary) -> Result<Decision> {
        let mut callbacks = std::mem::take(&mut self.callbacks);
        let metrics = std::mem::take(&mut self.epoch_metrics);
        let (rank, world) = self.data_parallel_rank().unwrap_or((0, 1));
        let context = EpochContext::new(summary, &metrics, self.counters.optimizer_steps)
            .on_rank(rank, world);
        let mut asked = Decision::CONTINUE;
        let mut result = Ok(());
        let (keepers, others): (Vec<_>, Vec<_>) = callbacks
            .iter_mut()
            .partition(|callback| callback.keeps_checkpoints());
        for callback in others.into_iter().chain(keepers) {
            let decided = callback.on_epoch_end(&context, self);
            // Before the next callback runs: one that writes a checkpoint saves this state.
            self.callback_states.record(callback.as_ref());
            match decided {
                Ok(decision) => {
                    asked.stop |= decision.stop;
                    asked.checkpoint |= decision.checkpoint;
                    asked.diverged |= decision.diverged;
                }
                Err(error) => {
                    result = Err(error);
                    break;
                }
            }
        }
        self.callbacks = callbacks;
        self.epoch_metrics = metrics;
        result.map(|()| asked)
    }

    /// Under data parallelism, what any replica's callbacks decided, on every replica (one
    /// all-reduce of the decision's flags, read back): early stopping on rank 0's validation
    /// stops every replica after the same epoch, as they must (each makes the same collective
    /// calls). A single trainer's decision is its own.
    fn agree_on(&mut self, decision: Decision) -> Result<Decision> {
        let Some(membership) = &self.membership else {
            return Ok(decision);
        };
        self.counters.readbacks += 1;
        let flags = [decision.stop, decision.checkpoint, decision.diverged].map(u64::from);
        let [stop, checkpoint, diverged] =
            all_reduce_counts::<B::InnerBackend, 3>(&membership.collective, flags, &self.device)
                .map_err(|message| {
                    membership.error("the all-reduce of the callbacks' decisions", message)
                })?;
        Ok(Decision {
            stop: stop > 0.0,
            checkpoint: checkpoint > 0.0,
            diverged: diverged > 0.0,
        })
    }

    /// After an optimizer step of a `fit`: when it is the first (the watch still runs), waits
    /// for the device to finish it, records the time since `fit` began and tells the
    /// observers. Does nothing after that.
    fn note_first_step(&mut self) -> Result<()> {
        let Some(watch) = self.observers.take_first_step() else {
            return Ok(());
        };
        crate::observers::sync::<B>(
            &self.device,
            "the device sync that ends the first step's timing",
        )?;
        let elapsed = watch.finish();
        self.time_to_first_step = Some(elapsed);
        self.observers.emit(&Event::FirstStep {
            step: self.counters.optimizer_steps,
            elapsed,
        });
        Ok(())
    }

    /// Trains on the current epoch's remaining batches; returns whether `max_steps` stopped it.
    fn train_epoch<D, I, E>(&mut self, data: &mut D, summary: &mut EpochSummary) -> Result<bool>
    where
        D: FnMut(Position) -> std::result::Result<I, E>,
        I: PositionedBatches<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let epoch = self.epoch;
        let data_error = |batch: u64, error: E| Error::Data {
            epoch,
            batch,
            source: Box::new(error),
        };
        // Overfitting replays the first batches of epoch 0 every epoch, counted in batches.
        let overfit = self.config.overfit_batches.is_some();
        let (request, skip) = if overfit {
            (Position::start_of(0), self.counters.epoch_batches)
        } else {
            (self.position, 0)
        };
        let limit = self
            .config
            .overfit_batches
            .or(self.config.max_batches_per_epoch);
        let mut batches =
            data(request).map_err(|error| data_error(self.counters.epoch_batches, error))?;
        let opened = batches.position();
        if !overfit && opened != request && opened != Position::start_of(epoch + 1) {
            return Err(Error::DataPosition {
                requested: request,
                reported: opened,
            });
        }
        self.check_resumed_data(batches.data_key())?;
        for _ in 0..skip {
            batches.next();
        }
        loop {
            if limit.is_some_and(|limit| self.counters.epoch_batches >= limit) {
                return Ok(false);
            }
            if self.window.is_empty() && self.max_steps_reached() {
                // On the epoch's last batch the epoch still ends (its validation, callbacks
                // and checkpoint run, as Lightning's do), when the data can tell without
                // reading another batch: its position is the next epoch's start (kiln's
                // loader), or it says no batch is left (`size_hint`).
                let exhausted = batches.size_hint().1 == Some(0)
                    || (!overfit && self.position == Position::start_of(epoch + 1));
                return Ok(!exhausted);
            }
            let step = self.counters.optimizer_steps + 1;
            let started = self.observers.start(Phase::DataWait, step);
            let waited_from = Instant::now();
            let next = batches.next();
            let wait = waited_from.elapsed();
            self.observers.end::<B>(started, &self.device)?;
            summary.data_wait += wait;
            let Some(next) = next else { return Ok(false) };
            let batch = next.map_err(|error| data_error(self.counters.epoch_batches, error))?;
            let samples = batches.last_batch_samples();
            summary.samples += samples;
            if !self.observers.is_empty() {
                self.observers.emit(&Event::BatchReady {
                    epoch,
                    batch: self.counters.epoch_batches,
                    samples,
                    wait,
                });
            }
            let outcome = self.train_batch(batch)?;
            if outcome.step.is_some() {
                self.note_first_step()?;
            }
            // Overfitting replays epoch 0's batches: their positions are not this epoch's.
            if overfit {
                self.count_samples(samples);
            } else {
                self.record_position(&batches);
            }
            if outcome.step.is_some() {
                self.checkpoint_if_due()?;
            }
        }
    }

    /// After `load_checkpoint`, the first data opened must be the stream the checkpoint was
    /// saved on (unless `resume_on_changed_data`).
    fn check_resumed_data(&mut self, opened: Option<Fingerprint>) -> Result<()> {
        if !std::mem::take(&mut self.check_data_key) || self.config.resume_on_changed_data {
            return Ok(());
        }
        match (self.data_key, opened) {
            (Some(saved), Some(current)) if saved != current => Err(Error::DataChanged {
                epoch: self.epoch,
                saved,
                current,
            }),
            _ => Ok(()),
        }
    }

    fn max_steps_reached(&self) -> bool {
        self.config
            .max_steps
            .is_some_and(|max| self.counters.optimizer_steps >= max)
    }

    /// Writes a step checkpoint when `every_steps` names the step just made.
    fn checkpoint_if_due(&mut self) -> Result<()> {
        let Some(checkpoint) = &self.config.checkpoint else {
            return Ok(());
        };
        let step = self.counters.optimizer_steps;
        if checkpoint.every_steps > 0 && step.is_multiple_of(checkpoint.every_steps) {
            self.write_scheduled_checkpoint()?;
        }
        Ok(())
    }

    /// Writes the epoch-end checkpoint when `at_epoch_end` asks for one, unless the epoch's last
    /// step (of its `epoch_steps`) was just saved by the step schedule, as Lightning skips a
    /// step already saved: one full save instead of two of the same step. That file holds the
    /// state before the epoch's end, and a resume from it runs the end again (validation,
    /// callbacks), as the uninterrupted run did.
    fn checkpoint_epoch_end_if_due(&mut self, epoch_steps: u64) -> Result<()> {
        let Some(checkpoint) = &self.config.checkpoint else {
            return Ok(());
        };
        let step = self.counters.optimizer_steps;
        let saved = epoch_steps > 0 && self.last_scheduled_checkpoint == Some(step);
        if checkpoint.at_epoch_end && !saved {
            self.write_scheduled_checkpoint()?;
        }
        Ok(())
    }

    /// After a rollback (a `load_checkpoint` of an earlier step than the directory's newest),
    /// sets the later steps' checkpoints aside, once, where this trainer writes checkpoints: the
    /// run's own files of those steps must not replace theirs, and `latest_checkpoint` must not
    /// take them for this run's.
    fn set_aside_abandoned_checkpoints(&mut self) -> Result<()> {
        let Some(checkpoint) = &self.config.checkpoint else {
            return Ok(());
        };
        if !self.writes_checkpoints() {
            return Ok(());
        }
        if let Some(loaded) = self.resumed_from_step.take() {
            crate::checkpoint_file::set_aside_after(&checkpoint.directory, loaded)?;
        }
        Ok(())
    }

    /// Writes a checkpoint into the configured directory (when checkpoints are on) and prunes
    /// the oldest past `keep_last`.
    fn write_scheduled_checkpoint(&mut self) -> Result<()> {
        let Some(checkpoint) = &self.config.checkpoint else {
            return Ok(());
        };
        // Replicas hold the same weights, optimizer and scaler: rank 0 alone writes them (its
        // running statistics and host RNG are its own).
        if !self.writes_checkpoints() {
            return Ok(());
        }
        let directory = checkpoint.directory.clone();
        let keep = checkpoint.keep_last as usize;
        let step = self.counters.optimizer_steps;
        let path = directory.join(crate::checkpoint_file::file_name(step));
        // Done when `fit` starts; again here for a rollback loaded while it ran (by the
        // end-of-epoch closure, which holds the trainer).
        self.set_aside_abandoned_checkpoints()?;
        self.save_checkpoint(&path)?;
        self.last_scheduled_checkpoint = Some(step);
        crate::checkpoint_file::prune(&directory, keep, step).map(drop)
    }
}

/// Lends callbacks the trainer's checkpoint writing; rank 0 alone writes under data
/// parallelism, as with the trainer's own checkpoints.
impl<B, M, O, S> CheckpointWriter for Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    fn write_checkpoint(&self, path: &std::path::Path) -> Result<()> {
        if self.writes_checkpoints() {
            self.save_checkpoint(path)?;
        }
        Ok(())
    }

    fn writes_checkpoints(&self) -> bool {
        Trainer::writes_checkpoints(self)
    }
}
