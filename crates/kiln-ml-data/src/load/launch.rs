//! Starting an epoch: checking the plan, wiring the channels, spawning its coordinator.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crossbeam_channel::unbounded;
use kiln_ml_core::{BlockFinder, BlockLayout, BlockSource, Observer, Plan};

use super::collate::Collate;
use super::config::LoaderConfig;
use super::coordinator::Coordinator;
use super::parts::{EpochParts, Launch, Start};
use super::pool::Jobs;
use super::prefetch_depth::prefetch_depth;
use super::schedule::{EpochSchedule, check_block_uses, last_occurrences};
use crate::{Error, Result};

/// Everything needed to start epochs: shared by a loader and its epochs, so an epoch can start
/// the next one early (see [`Epoch::prefetch_next`](crate::Epoch::prefetch_next)).
pub(crate) struct Launcher<S, C> {
    pub(crate) source: Arc<S>,
    pub(crate) collate: Arc<C>,
    pub(crate) jobs: Jobs,
    pub(crate) config: LoaderConfig,
    pub(crate) observers: Arc<Vec<Arc<dyn Observer>>>,
}

impl<S, C> Clone for Launcher<S, C> {
    fn clone(&self) -> Self {
        Self {
            source: Arc::clone(&self.source),
            collate: Arc::clone(&self.collate),
            jobs: self.jobs.clone(),
            config: self.config,
            observers: Arc::clone(&self.observers),
        }
    }
}

impl<S, C> Launch<C::Output> for Launcher<S, C>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    fn launch(self: Arc<Self>, plan: Plan, start: Start) -> Result<EpochParts<C::Output>> {
        let last_occurrence = last_occurrences(plan.order(), self.source.as_ref())?;
        let finder = BlockFinder::new(self.source.blocks());
        check_block_uses(&plan, self.source.blocks(), &finder)?;
        let plan = Arc::new(plan);
        let schedule = EpochSchedule::new(&plan, self.config.drop_last);
        let prefetch_batches =
            prefetch_depth(&self.config, self.source.as_ref(), schedule.batch_size) as u64;
        let (output_tx, output) = unbounded();
        let (credits, credits_rx) = unbounded();
        let cancel = Arc::new(AtomicBool::new(false));
        // With nothing to read, the next epoch may start at once.
        let reads_dispatched = Arc::new(AtomicBool::new(schedule.batches == 0));
        let coordinator = if schedule.batches == 0 {
            None
        } else {
            let coordinator = Coordinator {
                source: Arc::clone(&self.source),
                collate: Arc::clone(&self.collate),
                jobs: self.jobs.clone(),
                plan: Arc::clone(&plan),
                schedule: schedule.clone(),
                last_occurrence,
                finder,
                prefetch_batches,
                read_ahead_blocks: self.config.read_ahead_blocks,
                workers: self.config.workers,
                start,
                cancel: Arc::clone(&cancel),
                reads_dispatched: Arc::clone(&reads_dispatched),
                credits: credits_rx,
                output: output_tx,
            };
            let what = format!("kiln-ml-data epoch {} coordinator", plan.epoch());
            let handle = std::thread::Builder::new()
                .name(what.clone())
                .spawn(move || coordinator.run())
                .map_err(|source| Error::Thread { what, source })?;
            Some(handle)
        };
        Ok(EpochParts {
            plan,
            schedule,
            output,
            credits,
            credit_every: prefetch_batches.div_ceil(2),
            cancel,
            reads_dispatched,
            coordinator,
            observers: Arc::clone(&self.observers),
            launcher: self,
        })
    }
}
