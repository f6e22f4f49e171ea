//! `fit`: the whole loop over epochs, with data waits timed, checkpoints and limits.

use std::convert::Infallible;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_core::{Event, Phase, Position};

use crate::{Error, FitSummary, Result, TrainStep, Trainer};

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
    /// or the middle after [`load_checkpoint`](Self::load_checkpoint)) and returns that epoch's
    /// remaining batches: a kiln sampler's `resume`, or any iterator the caller positions.
    pub fn fit<D, I>(&mut self, mut data: D) -> Result<FitSummary>
    where
        D: FnMut(Position) -> I,
        I: IntoIterator<Item = M::Input>,
    {
        self.try_fit_with(
            |position| data(position).into_iter().map(Ok::<_, Infallible>),
            |_, _| Ok(()),
        )
    }

    /// [`fit`](Self::fit) with a callback after every epoch (validation, logging, early
    /// stopping by returning an error), given the trainer and the finished epoch.
    pub fn fit_with<D, I, F>(&mut self, mut data: D, on_epoch_end: F) -> Result<FitSummary>
    where
        D: FnMut(Position) -> I,
        I: IntoIterator<Item = M::Input>,
        F: FnMut(&mut Self, u64) -> Result<()>,
    {
        self.try_fit_with(
            |position| data(position).into_iter().map(Ok::<_, Infallible>),
            on_epoch_end,
        )
    }

    /// [`fit_with`](Self::fit_with) over batches that may fail to load: an `Err` stops
    /// training with [`Error::Data`] naming the epoch and batch.
    pub fn try_fit_with<D, I, E, F>(
        &mut self,
        mut data: D,
        mut on_epoch_end: F,
    ) -> Result<FitSummary>
    where
        D: FnMut(Position) -> I,
        I: IntoIterator<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
        F: FnMut(&mut Self, u64) -> Result<()>,
    {
        let mut reached_max_steps = false;
        while self.position.epoch < self.config.num_epochs {
            let epoch = self.position.epoch;
            if self.max_steps_reached() {
                reached_max_steps = true;
                break;
            }
            self.start_epoch();
            // Overfitting replays the first batches of epoch 0 every epoch.
            let (request, skip) = match self.config.overfit_batches {
                Some(_) => (Position::start_of(0), self.counters.epoch_batches),
                None => (self.position, 0),
            };
            let limit = self
                .config
                .overfit_batches
                .or(self.config.max_batches_per_epoch);
            let mut batches = data(request).into_iter().skip(skip as usize);
            loop {
                if limit.is_some_and(|limit| self.counters.epoch_batches >= limit) {
                    break;
                }
                if self.window.is_empty() && self.max_steps_reached() {
                    reached_max_steps = true;
                    break;
                }
                let step = self.counters.optimizer_steps + 1;
                let started = self.observers.start(Phase::DataWait, step);
                let waited_from = Instant::now();
                let next = batches.next();
                let wait = waited_from.elapsed();
                self.observers.end::<B>(started, &self.device)?;
                let Some(next) = next else { break };
                let batch = next.map_err(|error| Error::Data {
                    epoch,
                    batch: self.counters.epoch_batches,
                    source: Box::new(error),
                })?;
                if !self.observers.is_empty() {
                    self.observers.emit(&Event::BatchReady {
                        epoch,
                        batch: self.counters.epoch_batches,
                        samples: self.model().batch_samples(&batch),
                        wait,
                    });
                }
                let outcome = self.train_batch(batch)?;
                if outcome.step.is_some() {
                    self.checkpoint_if_due(false)?;
                }
            }
            if reached_max_steps {
                break;
            }
            self.end_epoch()?;
            // After the callback, so what it draws from the host RNG is in the checkpoint.
            on_epoch_end(self, epoch)?;
            self.checkpoint_if_due(true)?;
        }
        // The one readback `fit` adds: the summary's loss, once per call.
        let last_loss = self.last_loss()?;
        Ok(FitSummary {
            counters: self.counters,
            position: self.position,
            last_loss,
            reached_max_steps,
        })
    }

    fn max_steps_reached(&self) -> bool {
        self.config
            .max_steps
            .is_some_and(|max| self.counters.optimizer_steps >= max)
    }

    /// Writes a checkpoint when the configuration asks for one now.
    fn checkpoint_if_due(&mut self, epoch_end: bool) -> Result<()> {
        let Some(checkpoint) = &self.config.checkpoint else {
            return Ok(());
        };
        let due = if epoch_end {
            checkpoint.at_epoch_end
        } else {
            checkpoint.every_steps > 0
                && self
                    .counters
                    .optimizer_steps
                    .is_multiple_of(checkpoint.every_steps)
        };
        if !due {
            return Ok(());
        }
        let directory = checkpoint.directory.clone();
        let keep = checkpoint.keep_last as usize;
        let path = directory.join(crate::checkpoint_file::file_name(
            self.counters.optimizer_steps,
        ));
        self.save_checkpoint(&path)?;
        crate::checkpoint_file::prune(&directory, keep)
    }
}
