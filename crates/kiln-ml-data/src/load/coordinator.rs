//! The per-epoch coordinator: dispatches block reads in schedule order, assembles batches in
//! plan order, hands them to workers for collation, and frees blocks after their last use.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, select, unbounded};
use kiln_ml_core::{
    Block, BlockFinder, BlockIndex, BlockLayout, BlockSource, BoxError, Plan, ReadError,
};

use super::collate::Collate;
use super::held_samples::HeldSamples;
use super::parts::{Delivery, Start};
use super::pool::Jobs;
use super::reply::{Reply, Task};
use super::schedule::EpochSchedule;
use crate::cache_hint::prefetch;
use crate::scatter_hint;
use crate::{Error, Result};

/// How often an epoch started in the background looks for idle workers.
const BACKGROUND_POLL: Duration = Duration::from_millis(1);

/// Jobs per worker that may wait in the queue (its own and the previous epoch's, running ones
/// not counted) before an epoch started in the background queues more reads; a look may add
/// up to one collation job per worker on top. A worker finishing a job then finds the next
/// without waiting for the coordinator's next look. 1 left workers idle between jobs
/// (per-sample block shuffle 0.90 of sequential against 0.93 with 2, one paired run each); 3
/// and 4 measured as 2.
const BACKGROUND_QUEUE_PER_WORKER: usize = 2;

/// A block's samples as the coordinator stores them (taken out one by one), or why it failed,
/// tagged with its entry in the schedule's `uses`.
type BlockResult<I> = (usize, Result<HeldSamples<I>>);

/// Everything the coordinator thread owns for one epoch.
pub(crate) struct Coordinator<S: BlockSource, C: Collate<S::Item>> {
    pub(crate) source: Arc<S>,
    pub(crate) collate: Arc<C>,
    pub(crate) jobs: Jobs,
    pub(crate) plan: Arc<Plan>,
    pub(crate) schedule: EpochSchedule,
    /// Per position: move (true) or clone (false) the sample; `None` means always move.
    pub(crate) last_occurrence: Option<Vec<bool>>,
    /// The per-sample block lookup over the source's blocks (built once at launch, where it
    /// also checked the plan).
    pub(crate) finder: BlockFinder,
    pub(crate) prefetch_batches: u64,
    pub(crate) read_ahead_blocks: usize,
    /// Worker threads: batches assembled together are collated in at most this many jobs.
    pub(crate) workers: usize,
    /// Whether the consumer awaits the epoch from its start.
    pub(crate) start: Start,
    pub(crate) cancel: Arc<AtomicBool>,
    /// Set once every block read has been submitted (or the coordinator stopped): the next
    /// epoch may then start reading without delaying this one.
    pub(crate) reads_dispatched: Arc<AtomicBool>,
    /// Batches delivered so far, sent by the consumer every few batches.
    pub(crate) credits: Receiver<u64>,
    pub(crate) output: Sender<Delivery<C::Output>>,
}

/// Where a batch's samples sit: block and row, in plan order.
type Places = Vec<(BlockIndex, usize)>;

/// Mutable progress through the epoch.
struct Progress<I> {
    /// Next entry of `schedule.uses` to dispatch.
    next_read: usize,
    /// Per `uses` entry: its block arrived (or was freed after arriving).
    arrived: Vec<bool>,
    /// Length of the prefix of `uses` that has arrived.
    ready_prefix: usize,
    /// Indexed by block: a plain vector, because it is looked up once per delivered sample.
    resident: Vec<Option<HeldSamples<I>>>,
    /// Next entry of `by_last_use` to free.
    next_free: usize,
    /// Batches handed to the consumer (as of its last credit message).
    consumed: u64,
    /// Whether the consumer is on this epoch: from the start, or from its first credit.
    consumer_here: bool,
    /// Batches assembled and sent for collation.
    assembled: u64,
    /// The first failing block use in schedule order: its batch, its `uses` index, its error.
    failure: Option<(u64, usize, Error)>,
    /// Per `uses` entry: its read answered, with samples or an error.
    answered: Vec<bool>,
    /// Length of the prefix of `uses` whose reads have answered.
    answered_prefix: usize,
}

impl<S, C> Coordinator<S, C>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    /// Runs the epoch; a bug here (a panic) still reaches the consumer as an error.
    pub(crate) fn run(self) {
        let mut assembled = 0;
        let outcome = catch_unwind(AssertUnwindSafe(|| self.drive(&mut assembled)));
        self.reads_dispatched.store(true, Ordering::Relaxed);
        if let Err(payload) = outcome {
            let error = Error::panicked("scheduling the epoch".to_owned(), payload);
            let _ = self.output.send((assembled, Err(error)));
        }
    }

    fn drive(&self, assembled_out: &mut u64) {
        let (results_tx, results) = unbounded::<BlockResult<S::Item>>();
        let blocks = self.source.num_blocks();
        let mut progress = Progress {
            next_read: 0,
            arrived: vec![false; self.schedule.uses.len()],
            ready_prefix: 0,
            resident: std::iter::repeat_with(|| None).take(blocks).collect(),
            next_free: 0,
            consumed: 0,
            consumer_here: self.start == Start::Awaited,
            assembled: 0,
            failure: None,
            answered: vec![false; self.schedule.uses.len()],
            answered_prefix: 0,
        };
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return;
            }
            let spare = self.spare_jobs(&progress);
            let window_limit =
                (progress.consumed + self.prefetch_batches).min(self.schedule.batches);
            let batch_limit = spare.map_or(window_limit, |spare| {
                window_limit.min(progress.assembled + spare as u64)
            });
            let reads_held = self.dispatch_reads(&mut progress, batch_limit, spare, &results_tx);
            self.assemble_ready(&mut progress, batch_limit);
            // Work the background limit kept back: look again soon. Anything else waits for a
            // block or a credit.
            let held_back =
                reads_held || (batch_limit < window_limit && progress.assembled == batch_limit);
            *assembled_out = progress.assembled;
            // Reported once every earlier read has answered, so the error names the first
            // failing block in schedule order whichever worker finished first.
            if let Some((batch, index, _)) = &progress.failure
                && progress.assembled >= *batch
                && progress.answered_prefix >= *index
            {
                if let Some((batch, _, error)) = progress.failure.take() {
                    let _ = self.output.send((batch, Err(error)));
                }
                return;
            }
            if progress.assembled == self.schedule.batches {
                return;
            }
            // `Duration::MAX` sets no deadline.
            let wait = if held_back {
                BACKGROUND_POLL
            } else {
                Duration::MAX
            };
            select! {
                recv(results) -> message => {
                    if let Ok((index, result)) = message {
                        self.receive_block(&mut progress, index, result);
                    }
                }
                recv(self.credits) -> credit => match credit {
                    Ok(delivered) => {
                        progress.consumed = progress.consumed.max(delivered);
                        progress.consumer_here = true;
                    }
                    // The consumer dropped the epoch.
                    Err(_) => return,
                },
                default(wait) => {}
            }
        }
    }

    /// How many jobs an epoch started in the background may queue now: up to
    /// [`BACKGROUND_QUEUE_PER_WORKER`] per worker, counting the jobs the previous epoch has
    /// queued, so it works mostly in the workers' idle time (a job of it already running still
    /// delays whatever is submitted meanwhile). `None` once the consumer is on this epoch: then
    /// it reads and collates as far ahead as its window allows.
    ///
    /// The epoch before it still has batches to deliver; reading this epoch's window at full
    /// speed took CPU time from them (a block shuffle's window is ~190 blocks, a sequential
    /// plan's ~16), and charged a shuffled epoch for its successor's start.
    fn spare_jobs(&self, progress: &Progress<S::Item>) -> Option<usize> {
        if progress.consumer_here {
            return None;
        }
        let queue = BACKGROUND_QUEUE_PER_WORKER * self.workers.max(1);
        Some(queue.saturating_sub(self.jobs.queued()))
    }

    /// Reads every block the prefetch window needs, plus up to `read_ahead_blocks` beyond it
    /// (in schedule order) so workers keep busy while the consumer works through resident
    /// blocks; at most `most` of them. Returns whether `most` held a read back.
    fn dispatch_reads(
        &self,
        progress: &mut Progress<S::Item>,
        batch_limit: u64,
        most: Option<usize>,
        results: &Sender<BlockResult<S::Item>>,
    ) -> bool {
        let mut budget = most.unwrap_or(usize::MAX);
        let mut held = false;
        let uses = &self.schedule.uses;
        let window_end = self.schedule.end_of_batches(batch_limit);
        let in_window = self.schedule.uses_before(window_end);
        let failed_at = progress
            .failure
            .as_ref()
            .map(|(batch, _, _)| self.schedule.end_of_batches(*batch));
        while let Some(used) = uses.get(progress.next_read) {
            if failed_at.is_some_and(|end| used.first_use >= end) {
                break;
            }
            // Uses are sorted by first use: past the window, `next_read - in_window` reads
            // are already ahead of it.
            if used.first_use >= window_end
                && progress.next_read - in_window >= self.read_ahead_blocks
            {
                break;
            }
            if budget == 0 {
                held = true;
                break;
            }
            budget -= 1;
            self.submit_read(progress.next_read, used.block, results.clone());
            progress.next_read += 1;
        }
        if progress.next_read == uses.len() {
            self.reads_dispatched.store(true, Ordering::Relaxed);
        }
        held
    }

    fn submit_read(
        &self,
        use_index: usize,
        block: BlockIndex,
        results: Sender<BlockResult<S::Item>>,
    ) {
        let source = Arc::clone(&self.source);
        let cancel = Arc::clone(&self.cancel);
        let Block { file, rows, .. } = self.source.blocks()[block as usize];
        let scattered = scatter_hint::is_scattered(&self.schedule.uses[use_index], rows);
        // A remote source starts fetching now; the read itself waits its turn for a worker.
        self.source.prefetch(block);
        // Created before the job is queued: the epoch gets an answer whatever panics in the job
        // (`describe_block` on the error path, an item's `Drop`), even if it never runs.
        let reply = Reply::new(results, use_index, Task::Read { block, file });
        let job = Box::new(move || {
            if cancel.load(Ordering::Relaxed) {
                // The epoch is gone: what the source fetched ahead for this read goes too.
                source.cancel_prefetch(block);
                return reply.abandon();
            }
            reply.answer(|| {
                // Described only on failure: for a Parquet source that formats a path.
                let location = || source.describe_block(block);
                let read = catch_unwind(AssertUnwindSafe(|| {
                    scatter_hint::reading(scattered, || source.read_block(block))
                }));
                match read {
                    Err(payload) => {
                        Err(Error::panicked(format!("reading {}", location()), payload))
                    }
                    Ok(Err(error)) => Err(Error::from_source(location(), block, file, error)),
                    Ok(Ok(samples)) if samples.len() as u64 != rows => {
                        Err(Error::Read(ReadError::Source {
                            location: location(),
                            block,
                            file,
                            source: BoxError::from(format!(
                                "the source returned {} samples for a block of {rows} rows",
                                samples.len()
                            )),
                        }))
                    }
                    Ok(Ok(samples)) => Ok(HeldSamples::new(samples)),
                }
            });
        });
        self.jobs.queue(job);
    }

    fn receive_block(
        &self,
        progress: &mut Progress<S::Item>,
        index: usize,
        result: Result<HeldSamples<S::Item>>,
    ) {
        let block = self.schedule.uses[index].block;
        progress.answered[index] = true;
        while progress.answered.get(progress.answered_prefix) == Some(&true) {
            progress.answered_prefix += 1;
        }
        match result {
            Ok(samples) => {
                progress.resident[block as usize] = Some(samples);
                progress.arrived[index] = true;
                while progress.arrived.get(progress.ready_prefix) == Some(&true) {
                    progress.ready_prefix += 1;
                }
            }
            Err(error) => {
                let batch = self.schedule.batch_of(self.schedule.uses[index].first_use);
                if progress
                    .failure
                    .as_ref()
                    .is_none_or(|(earliest, first, _)| (batch, index) < (*earliest, *first))
                {
                    progress.failure = Some((batch, index, error));
                }
            }
        }
    }

    /// Assembles, in order, every batch whose blocks have all arrived, up to the limit and
    /// short of a failed batch.
    fn assemble_ready(&self, progress: &mut Progress<S::Item>, batch_limit: u64) {
        let mut assembled = Vec::new();
        self.assemble_into(progress, batch_limit, &mut assembled);
        self.submit_collations(assembled);
    }

    /// Assembles the ready batches into `assembled` (see [`assemble_ready`]).
    fn assemble_into(
        &self,
        progress: &mut Progress<S::Item>,
        batch_limit: u64,
        assembled: &mut Vec<(u64, Vec<S::Item>, bool)>,
    ) {
        // The next batch's samples, located and asked of the CPU while this one is taken: in a
        // shuffled plan their cache and TLB misses then overlap this batch's work.
        let mut located: Option<(u64, Places)> = None;
        while progress.assembled < batch_limit {
            if progress
                .failure
                .as_ref()
                .is_some_and(|(batch, _, _)| progress.assembled >= *batch)
            {
                return;
            }
            let range = self.schedule.batch_range(progress.assembled);
            if progress.ready_prefix < self.schedule.uses_before(range.end) {
                return;
            }
            let places = match located.take() {
                Some((batch, places)) if batch == progress.assembled => Ok(places),
                _ => self.locate(range.clone()).inspect(|places| {
                    prefetch_slots(progress, places);
                }),
            };
            let next = progress.assembled + 1;
            if next < batch_limit {
                let next_range = self.schedule.batch_range(next);
                if progress.ready_prefix >= self.schedule.uses_before(next_range.end)
                    && let Ok(places) = self.locate(next_range)
                {
                    prefetch_slots(progress, &places);
                    located = Some((next, places));
                }
            }
            match places.and_then(|places| self.take_samples(progress, range.clone(), places)) {
                Ok(samples) => {
                    // The consumer has taken every earlier batch (as of its last credit, sent
                    // every few batches): it waits for this one, or soon will, so the collation
                    // goes ahead of queued reads. Other batches queue behind the reads before
                    // them. A credit before each wait would catch more stalls, but the extra
                    // wake-ups lowered sequential throughput on 2 cores (commit 9539150).
                    let urgent = progress.consumer_here && progress.assembled == progress.consumed;
                    assembled.push((progress.assembled, samples, urgent));
                }
                Err(error) => {
                    // Every read of this batch arrived: no read failure comes before it.
                    progress.failure = Some((progress.assembled, 0, error));
                    return;
                }
            }
            // Free every block whose last use is now assembled.
            let by_last_use = &self.schedule.by_last_use;
            while let Some(&(last_use, block)) = by_last_use.get(progress.next_free) {
                if last_use >= range.end {
                    break;
                }
                progress.resident[block as usize] = None;
                progress.next_free += 1;
            }
            progress.assembled += 1;
        }
    }

    /// Where each sample of the plan's `positions` sits (block and row), from the layout alone,
    /// which stays in cache.
    fn locate(&self, positions: std::ops::Range<u64>) -> Result<Places> {
        let first = positions.start;
        let order = &self.plan.order()[positions.start as usize..positions.end as usize];
        let mut places = Vec::with_capacity(order.len());
        for (offset, &sample) in order.iter().enumerate() {
            let Some((block, row)) = self.finder.place(sample) else {
                return Err(Error::PlanMismatch {
                    reason: format!(
                        "plan position {} names unknown sample {sample}",
                        first + offset as u64
                    ),
                });
            };
            places.push((block, row as usize));
        }
        Ok(places)
    }

    /// Moves (or, for a repeated sample, clones) the samples of the plan's `positions`, found at
    /// `places`, out of their blocks. A failed epoch ends: samples already taken do not matter.
    fn take_samples(
        &self,
        progress: &mut Progress<S::Item>,
        positions: std::ops::Range<u64>,
        places: Places,
    ) -> Result<Vec<S::Item>> {
        let first = positions.start;
        let order = &self.plan.order()[positions.start as usize..positions.end as usize];
        let missing = |offset: usize, block: BlockIndex| Error::PlanMismatch {
            reason: format!(
                "sample {} at plan position {} is in block {block}, which the plan's schedule \
                 does not hold there (was the plan built for another layout?)",
                order[offset],
                first + offset as u64
            ),
        };
        let mut samples = Vec::with_capacity(order.len());
        for (offset, (block, row)) in places.into_iter().enumerate() {
            let held = progress.resident[block as usize]
                .as_mut()
                .ok_or_else(|| missing(offset, block))?;
            let moved = self
                .last_occurrence
                .as_ref()
                .is_none_or(|last| last[(first as usize) + offset]);
            let item = if moved {
                held.take(row)
            } else {
                held.get(row).cloned()
            };
            samples.push(item.ok_or_else(|| missing(offset, block))?);
        }
        Ok(samples)
    }

    /// Hands assembled batches to the workers: consecutive batches in one job, at most one job
    /// per worker, so a run of cheap collations (columnar batches) costs a few thread
    /// wake-ups instead of one per batch, and expensive ones still spread over every worker.
    /// A job holding the batch the consumer waits for jumps the queue of reads.
    fn submit_collations(&self, assembled: Vec<(u64, Vec<S::Item>, bool)>) {
        if assembled.is_empty() {
            return;
        }
        let per_job = assembled.len().div_ceil(self.workers.max(1));
        let mut assembled = assembled.into_iter().peekable();
        while assembled.peek().is_some() {
            let group: Vec<_> = assembled.by_ref().take(per_job).collect();
            let urgent = group.iter().any(|(_, _, urgent)| *urgent);
            let jobs: Vec<_> = group
                .into_iter()
                .map(|(batch, samples, _)| {
                    let label = self.schedule.first_batch + batch;
                    let reply =
                        Reply::new(self.output.clone(), batch, Task::Collate { batch: label });
                    (reply, samples)
                })
                .collect();
            let collate = Arc::clone(&self.collate);
            let cancel = Arc::clone(&self.cancel);
            let job = Box::new(move || {
                for (reply, samples) in jobs {
                    if cancel.load(Ordering::Relaxed) {
                        reply.abandon();
                        continue;
                    }
                    reply.answer(|| Ok(collate.stage(samples)));
                }
            });
            if urgent {
                self.jobs.urgent(job);
            } else {
                self.jobs.queue(job);
            }
        }
    }
}

/// Asks the CPU for the resident slots at `places` (those not resident are skipped: taking them
/// fails), without waiting: a tight loop of prefetches lets many misses run at once.
fn prefetch_slots<I>(progress: &Progress<I>, places: &Places) {
    for &(block, row) in places {
        if let Some(slot) = progress.resident[block as usize]
            .as_ref()
            .and_then(|held| held.slot(row))
        {
            prefetch(slot);
        }
    }
}
