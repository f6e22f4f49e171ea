//! `Loader`: executes epoch plans with persistent workers and ordered, bounded prefetch.

use std::sync::Arc;

use kiln_ml_core::{
    BlockFinder, BlockLayout, BlockSource, Fingerprint, Observer, Plan, PlanRequest, Position,
    ResumePoint, Sampler,
};

use super::collate::Collate;
use super::config::LoaderConfig;
use super::epoch::Epoch;
use super::launch::Launcher;
use super::parts::{Launch, Start};
use super::pool::WorkerPool;
use super::prefetch_depth::prefetch_depth;
use super::residency::LoaderResidency;
use super::schedule::{EpochSchedule, check_block_uses, window_batch_size};
use crate::{Error, Result};

/// Executes a sampler's epoch [`Plan`] over a block source and yields collated batches.
///
/// - **Workers**: `workers` persistent threads, started once, read blocks (running the whole
///   source stack: Parquet decode, cache, transform) and collate batches.
/// - **Order**: blocks are read in the plan's schedule order; batches are assembled strictly in
///   plan order by one coordinator per epoch, so the output is identical for any worker count.
/// - **Prefetch**: at most [`prefetch_batches`](Self::prefetch_batches) batches are assembled
///   ahead of the consumer (by default as many as 64 MiB holds, 2 to 256); blocks are read as
///   far ahead as those batches need, plus at most `read_ahead_blocks` more in schedule order.
/// - **Freeing**: a block is dropped as soon as the batch holding its last use is assembled.
/// - **Errors**: a failed read, a failing transform, or a panic in a read or a collation ends
///   the epoch with an `Err` naming the block and file (or batch), after every batch before it:
///   never a hang, never a silently missing batch.
/// - **Observers** receive [`Event::BatchLoaded`](kiln_ml_core::Event::BatchLoaded) with the time the
///   consumer spent in the loader for each batch (waiting, finishing it, launching a next epoch).
/// - **Resume**: [`resume_epoch`](Self::resume_epoch) continues from a saved [`Position`]
///   ([`Epoch::position`]) with exactly the batches an uninterrupted run would still deliver.
/// - **Back to back**: [`Epoch::prefetch_next`] starts reading the next epoch's first blocks
///   while the current one finishes (in the workers' idle time), so epochs do not each open
///   with a stall.
///
/// # Residency
///
/// While an epoch runs, the loader holds at most the blocks that the batches within the
/// prefetch window use, plus `read_ahead_blocks` blocks read ahead, plus `prefetch_batches` assembled
/// batches. How many blocks the window spans depends on the plan: the few the window's batches
/// cover for a sequential plan (about 16 for batches of 64 over 1,024-row blocks at the default
/// depth), about the number of interleaved blocks for a block shuffle, and every block for a
/// uniform random permutation. [`residency`](Self::residency) computes this bound for a plan
/// before running it (an upper bound: a block is freed once its last batch is assembled, which
/// may be before the consumer reaches that batch).
///
/// ```
/// use kiln_ml_core::{PlanRequest, Sampler};
/// use kiln_ml_data::{collate_fn, Loader, LoaderConfig};
/// use kiln_ml_testkit::{InOrderSampler, MemorySource};
///
/// let source = MemorySource::with_ids(&[&[3, 2], &[4]]);
/// let config = LoaderConfig::new().with_workers(2);
/// let loader = Loader::new(source, collate_fn(|ids: Vec<u64>| ids), config).unwrap();
/// let epoch = loader.plan_epoch(&InOrderSampler::new(4), &PlanRequest::new(7, 0)).unwrap();
/// let batches: Vec<Vec<u64>> = epoch.collect::<Result<_, _>>().unwrap();
/// assert_eq!(batches, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8]]);
/// ```
pub struct Loader<S, C> {
    launcher: Arc<Launcher<S, C>>,
    pool: WorkerPool,
}

impl<S, C> Loader<S, C>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    /// A loader over `source`, collating with `collate`; starts the worker threads.
    pub fn new(source: S, collate: C, config: LoaderConfig) -> Result<Self> {
        Self::with_shared_source(Arc::new(source), collate, config)
    }

    /// A loader over a source shared with other code (for example to read its cache
    /// statistics while loading).
    pub fn with_shared_source(source: Arc<S>, collate: C, config: LoaderConfig) -> Result<Self> {
        config.validate()?;
        let pool = WorkerPool::new(config.workers)?;
        let launcher = Launcher {
            source,
            collate: Arc::new(collate),
            jobs: pool.jobs(),
            config,
            observers: Arc::new(Vec::new()),
        };
        Ok(Self {
            launcher: Arc::new(launcher),
            pool,
        })
    }

    /// Adds an observer of [`Event::BatchLoaded`](kiln_ml_core::Event::BatchLoaded) events.
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        let mut observers: Vec<Arc<dyn Observer>> =
            self.launcher.observers.iter().cloned().collect();
        observers.push(Arc::new(observer));
        self.launcher = Arc::new(Launcher {
            observers: Arc::new(observers),
            ..(*self.launcher).clone()
        });
        self
    }

    /// The source.
    pub fn source(&self) -> &Arc<S> {
        &self.launcher.source
    }

    /// The settings.
    pub fn config(&self) -> LoaderConfig {
        self.launcher.config
    }

    /// Starts delivering a plan (a fresh one, or one resumed with
    /// [`Sampler::resume`](kiln_ml_core::Sampler::resume)).
    ///
    /// Fails when the plan names samples the source does not have.
    pub fn epoch(&self, plan: Plan) -> Result<Epoch<'_, C::Output>> {
        let launcher: Arc<dyn Launch<C::Output>> = self.launcher.clone();
        Ok(Epoch::new(launcher.launch(plan, Start::Awaited)?))
    }

    /// Plans an epoch over the source with `sampler` and starts delivering it.
    pub fn plan_epoch(
        &self,
        sampler: &(impl Sampler + ?Sized),
        request: &PlanRequest,
    ) -> Result<Epoch<'_, C::Output>> {
        let plan = sampler.plan(self.source().as_ref(), request)?;
        Ok(self
            .epoch(plan)?
            .with_data_key(self.data_key(sampler, request)))
    }

    /// Plans the epoch of `request` with `sampler` and announces it to `current` as its next
    /// epoch ([`Epoch::prefetch_next`]), with the stream's [`data_key`](Self::data_key), so
    /// the next epoch's resume points are checked as those of [`plan_epoch`](Self::plan_epoch)
    /// are.
    pub fn plan_next(
        &self,
        current: &mut Epoch<'_, C::Output>,
        sampler: &(impl Sampler + ?Sized),
        request: &PlanRequest,
    ) -> Result<()> {
        let plan = sampler.plan(self.source().as_ref(), request)?;
        current.prefetch_next_keyed(plan, self.data_key(sampler, request));
        Ok(())
    }

    /// Plans an epoch and continues it from a saved position: delivers exactly the batches an
    /// uninterrupted run would still have delivered.
    ///
    /// The position alone does not say which data it counts in: prefer
    /// [`resume`](Self::resume) with the [`ResumePoint`] an epoch reports, which also refuses
    /// to continue on other data. This is the explicit opt-out of that check.
    pub fn resume_epoch(
        &self,
        sampler: &(impl Sampler + ?Sized),
        request: &PlanRequest,
        position: Position,
    ) -> Result<Epoch<'_, C::Output>> {
        let plan = sampler.resume(self.source().as_ref(), request, position)?;
        Ok(self
            .epoch(plan)?
            .with_data_key(self.data_key(sampler, request)))
    }

    /// Continues from a saved [`ResumePoint`] (an epoch's
    /// [`resume_point`](kiln_ml_core::PositionedBatches::resume_point)): like
    /// [`resume_epoch`](Self::resume_epoch), but fails with [`Error::DataChanged`] when the
    /// point was saved on other data (files added, removed or rewritten), another seed or other
    /// sampler settings, where the same position would silently repeat or skip samples.
    pub fn resume(
        &self,
        sampler: &(impl Sampler + ?Sized),
        request: &PlanRequest,
        point: &ResumePoint,
    ) -> Result<Epoch<'_, C::Output>> {
        let current = self.data_key(sampler, request);
        if let Some(saved) = point.data_key
            && saved != current
        {
            return Err(Error::DataChanged { saved, current });
        }
        self.resume_epoch(sampler, request, point.position)
    }

    /// The identity of the stream `sampler` makes of this source for `request`'s seed.
    pub fn data_key(
        &self,
        sampler: &(impl Sampler + ?Sized),
        request: &PlanRequest,
    ) -> Fingerprint {
        kiln_ml_core::data_key(
            self.source().fingerprint(),
            request.seed,
            sampler.stream_fingerprint(request),
        )
    }

    /// What executing `plan` holds in memory at most, in samples (see the type's docs).
    ///
    /// Fails with [`Error::PlanMismatch`] for a plan made for another source, as
    /// [`epoch`](Self::epoch) does.
    pub fn residency(&self, plan: &Plan) -> Result<LoaderResidency> {
        let blocks = self.source().blocks();
        check_block_uses(plan, blocks, &BlockFinder::new(blocks))?;
        let config = self.config();
        let schedule = EpochSchedule::new(plan, config.drop_last);
        Ok(LoaderResidency::of(
            &schedule,
            self.source().as_ref(),
            self.prefetch_batches(plan) as u64,
            config.read_ahead_blocks,
        ))
    }

    /// How many batches the loader assembles ahead of the consumer for `plan`: the configured
    /// [`prefetch_batches`](LoaderConfig::prefetch_batches), or by default as many as
    /// [`prefetch_bytes`](LoaderConfig::prefetch_bytes) holds at the source's block sizes
    /// (for size-budget batches, at their mean sample count).
    pub fn prefetch_batches(&self, plan: &Plan) -> usize {
        prefetch_depth(
            &self.config(),
            self.source().as_ref(),
            window_batch_size(plan),
        )
    }
}

// `init` sits beside `Loader::new` so that the configuration (config.rs) needs nothing from the
// loader and the two files do not import each other.
impl LoaderConfig {
    /// A loader with these settings over `source`, collating with `collate`; starts the worker
    /// threads. The same as [`Loader::new`].
    pub fn init<S, C>(self, source: S, collate: C) -> Result<Loader<S, C>>
    where
        S: BlockSource + BlockLayout + 'static,
        S::Item: Clone + 'static,
        C: Collate<S::Item> + 'static,
        C::Output: 'static,
    {
        Loader::new(source, collate, self)
    }
}

impl<S, C> std::fmt::Debug for Loader<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.launcher.config)
            .field("workers", &self.pool)
            .field("observers", &self.launcher.observers.len())
            .finish_non_exhaustive()
    }
}
