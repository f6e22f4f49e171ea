//! The consumer side of an epoch: batches in plan order, wait times, the resume position.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use kiln_ml_core::{Event, Fingerprint, Observer, Plan, Position, PositionedBatches, ResumePoint};

use super::parts::{Delivery, EpochParts, Launch, Start};
use super::reply::Task;
use super::schedule::EpochSchedule;
use super::staged::Staged;
use crate::{Error, Result};

/// One epoch of batches, in plan order: an iterator of `Result<batch>`.
///
/// Batches come out strictly in plan order whatever the worker count. A failed block read, a
/// failing transform or a panic in a worker ends the epoch with one `Err` naming the block and
/// file (or batch), after every batch before it; the iterator then returns `None`. Dropping
/// the epoch early stops its background work: pending reads and collations are skipped and the
/// coordinator thread is joined.
pub struct Epoch<'loader, O> {
    plan: Arc<Plan>,
    schedule: EpochSchedule,
    delivered_batches: u64,
    last_batch_samples: u64,
    /// The stream's identity, when the epoch was planned by the loader from a sampler.
    data_key: Option<Fingerprint>,
    finished: bool,
    pending: BTreeMap<u64, Result<Staged<O>>>,
    output: Receiver<Delivery<O>>,
    credits: Option<Sender<u64>>,
    credit_every: u64,
    /// The last delivered count sent as a credit.
    last_credit: u64,
    cancel: Arc<AtomicBool>,
    coordinator: Option<JoinHandle<()>>,
    observers: Arc<Vec<Arc<dyn Observer>>>,
    reads_dispatched: Arc<AtomicBool>,
    launcher: Arc<dyn Launch<O>>,
    next: Next<'loader, O>,
    /// The stream the announced next plan belongs to, when the announcement named it.
    next_key: Option<Fingerprint>,
    loader: PhantomData<&'loader ()>,
}

/// The epoch after this one, when one was announced with [`Epoch::prefetch_next`].
enum Next<'loader, O> {
    Nothing,
    Planned(Plan),
    Started(Box<Epoch<'loader, O>>),
    Failed(Error),
}

impl<'loader, O> Epoch<'loader, O> {
    pub(crate) fn new(parts: EpochParts<O>) -> Self {
        Self {
            finished: parts.schedule.batches == 0,
            plan: parts.plan,
            schedule: parts.schedule,
            delivered_batches: 0,
            last_batch_samples: 0,
            data_key: None,
            pending: BTreeMap::new(),
            output: parts.output,
            credits: Some(parts.credits),
            credit_every: parts.credit_every.max(1),
            last_credit: 0,
            cancel: parts.cancel,
            coordinator: parts.coordinator,
            observers: parts.observers,
            reads_dispatched: parts.reads_dispatched,
            launcher: parts.launcher,
            next: Next::Nothing,
            next_key: None,
            loader: PhantomData,
        }
    }

    /// Announces the next epoch's plan so its first blocks are read while this epoch finishes.
    ///
    /// The next epoch starts (its coordinator reads blocks and assembles up to the prefetch depth)
    /// as soon as this epoch has requested all of its own blocks, so the next epoch's opening
    /// reads overlap this epoch's last batches instead of stalling the start of the next one.
    /// Until the consumer takes it, it works mostly in the workers' idle time: it queues reads
    /// only while fewer than two jobs per worker wait in the queue, so it does not crowd out
    /// this epoch's work (one of its reads already running still delays a batch submitted
    /// meanwhile). Take it with [`into_next`](Self::into_next). While both run, the loader
    /// holds both epochs' resident blocks.
    ///
    /// Whether it has started is checked here and each time this epoch delivers a batch; see
    /// [`next_started`](Self::next_started). Announcing again replaces the announced epoch, and
    /// drops it if it had started.
    ///
    /// The plan alone does not say which stream (data, sampler, seed) it belongs to, so the next
    /// epoch reports no [`data_key`](Self::data_key): announce it with
    /// [`Loader::plan_next`](crate::Loader::plan_next) (or
    /// [`prefetch_next_keyed`](Self::prefetch_next_keyed)) for a resume point that is checked.
    pub fn prefetch_next(&mut self, plan: Plan) {
        self.announce(plan, None);
    }

    /// [`prefetch_next`](Self::prefetch_next) for a plan of the stream `data_key` names
    /// ([`Loader::data_key`](crate::Loader::data_key) of the sampler and request that made it):
    /// the next epoch reports it, and its resume points are checked against it.
    pub fn prefetch_next_keyed(&mut self, plan: Plan, data_key: Fingerprint) {
        self.announce(plan, Some(data_key));
    }

    fn announce(&mut self, plan: Plan, data_key: Option<Fingerprint>) {
        self.next = Next::Planned(plan);
        self.next_key = data_key;
        self.start_next_if_ready();
    }

    /// Whether the epoch announced with [`prefetch_next`](Self::prefetch_next) is already
    /// reading its blocks (`false` when none was announced, or it waits for this epoch to
    /// request the last of its own).
    pub fn next_started(&self) -> bool {
        matches!(self.next, Next::Started(_))
    }

    /// The next epoch announced with [`prefetch_next`](Self::prefetch_next) (started now if it
    /// had not started yet); `None` when none was announced. Drops what is left of this epoch.
    pub fn into_next(mut self) -> Option<Result<Epoch<'loader, O>>> {
        // The stream the announcement named, if any: the plan alone cannot tell.
        let data_key = self.next_key;
        let next = match std::mem::replace(&mut self.next, Next::Nothing) {
            Next::Nothing => None,
            Next::Planned(plan) => Some(
                Arc::clone(&self.launcher)
                    .launch(plan, Start::Awaited)
                    .map(Epoch::new),
            ),
            Next::Started(mut next) => {
                next.consumer_arrived();
                Some(Ok(*next))
            }
            Next::Failed(error) => Some(Err(error)),
        };
        next.map(|epoch| {
            epoch.map(|mut epoch| {
                epoch.data_key = data_key;
                epoch
            })
        })
    }

    /// The position and the data key together: what to save to resume with
    /// [`Loader::resume`](crate::Loader::resume).
    pub fn resume_point(&self) -> ResumePoint {
        PositionedBatches::resume_point(self)
    }

    /// Reports `key` as the stream's identity (see [`data_key`](Self::data_key)).
    pub(crate) fn with_data_key(mut self, key: Fingerprint) -> Self {
        self.data_key = Some(key);
        self
    }

    /// The identity of the stream this epoch belongs to ([`kiln_ml_core::data_key`] of the source's
    /// layout, the seed and the sampler's settings) when the loader planned it
    /// ([`Loader::plan_epoch`](crate::Loader::plan_epoch),
    /// [`resume_epoch`](crate::Loader::resume_epoch)); `None` for a plan handed over as is.
    pub fn data_key(&self) -> Option<Fingerprint> {
        self.data_key
    }

    fn start_next_if_ready(&mut self) {
        let ready = self.finished || self.reads_dispatched.load(Ordering::Relaxed);
        if !ready || !matches!(self.next, Next::Planned(_)) {
            return;
        }
        if let Next::Planned(plan) = std::mem::replace(&mut self.next, Next::Nothing) {
            self.next = match Arc::clone(&self.launcher).launch(plan, Start::InBackground) {
                Ok(parts) => Next::Started(Box::new(Epoch::new(parts))),
                Err(error) => Next::Failed(error),
            };
        }
    }

    /// The epoch being delivered.
    pub fn epoch(&self) -> u64 {
        self.plan.epoch()
    }

    /// Batches this epoch delivers in all (after any resume skip; with `drop_last`, whole
    /// batches only).
    pub fn batches(&self) -> u64 {
        self.schedule.batches
    }

    /// Batches delivered so far.
    pub fn delivered_batches(&self) -> u64 {
        self.delivered_batches
    }

    /// The position to save for an exact resume: after the batches delivered so far (the start
    /// of the next epoch once every batch was delivered).
    pub fn position(&self) -> Position {
        if self.delivered_batches == self.schedule.batches && !self.has_failed() {
            return Position::start_of(self.plan.epoch() + 1);
        }
        // Whole batches of the plan were delivered, so this is always a valid position.
        let delivered = self.schedule.end_of_batches(self.delivered_batches);
        self.plan
            .position_after(delivered)
            .expect("positions after whole batches are valid")
    }

    /// Tells the coordinator of an epoch started in the background that the consumer is on it
    /// now: it stops keeping to the workers' idle time.
    fn consumer_arrived(&mut self) {
        if let Some(credits) = &self.credits {
            let _ = credits.send(self.delivered_batches);
        }
    }

    /// Tells the coordinator how many batches were taken, unless it already knows.
    fn send_credit(&mut self) {
        if let Some(credits) = &self.credits
            && self.last_credit != self.delivered_batches
        {
            let _ = credits.send(self.delivered_batches);
            self.last_credit = self.delivered_batches;
        }
    }

    fn has_failed(&self) -> bool {
        self.finished && self.delivered_batches < self.schedule.batches
    }

    /// Blocks until batch `delivered_batches` is available.
    /// Finishes a batch whose last part was left to this thread; a panic there ends the epoch
    /// with the same error as one on a worker.
    fn finish(&self, staged: Staged<O>) -> Result<O> {
        if staged.is_ready() {
            return Ok(staged.finish());
        }
        let batch = self.schedule.first_batch + self.delivered_batches;
        catch_unwind(AssertUnwindSafe(|| staged.finish()))
            .map_err(|payload| Error::panicked(Task::Collate { batch }.to_string(), payload))
    }

    fn wait_for_next(&mut self) -> Result<Staged<O>> {
        let wanted = self.delivered_batches;
        loop {
            if let Some(result) = self.pending.remove(&wanted) {
                return result;
            }
            match self.output.recv() {
                Ok((batch, result)) => {
                    self.pending.insert(batch, result);
                }
                Err(_) => {
                    return Err(Error::LoaderStopped {
                        // Numbered as batches are: from the epoch's start, resumed or not.
                        delivered: self.schedule.first_batch + wanted,
                        reason: "every background thread of the epoch exited".to_owned(),
                    });
                }
            }
        }
    }
}

impl<O> Iterator for Epoch<'_, O> {
    type Item = Result<O>;

    fn next(&mut self) -> Option<Result<O>> {
        if self.finished {
            self.start_next_if_ready();
            return None;
        }
        let started = Instant::now();
        let result = self.wait_for_next().and_then(|staged| self.finish(staged));
        // Finishing on this thread (device tensors on a fusion backend) is input time too.
        let mut wait = started.elapsed();
        let batch = match result {
            Ok(batch) => batch,
            Err(error) => {
                self.finished = true;
                // As a drop does: a read error already stopped the coordinator, a collation
                // error did not, and it would go on holding its window of blocks and batches
                // while the caller keeps the failed epoch (to read its position, say).
                self.cancel.store(true, Ordering::Relaxed);
                self.credits.take();
                self.pending.clear();
                return Some(Err(error));
            }
        };
        let range = self.schedule.batch_range(self.delivered_batches);
        let samples = range.end - range.start;
        self.last_batch_samples = samples;
        let batch_index = self.schedule.first_batch + self.delivered_batches;
        self.delivered_batches += 1;
        self.finished = self.delivered_batches == self.schedule.batches;
        // Telling the coordinator every few batches rather than every batch halves its
        // wake-ups or better; it stays within the prefetch depth either way.
        if self.delivered_batches.is_multiple_of(self.credit_every) || self.finished {
            self.send_credit();
        }
        // Launching an announced next epoch (its plan's checks, O(samples)) runs on this
        // thread, once: input time too, in this batch's wait. Timed only while one waits to
        // launch, so other batches do not read the clock for it.
        if matches!(self.next, Next::Planned(_)) {
            let launching = Instant::now();
            self.start_next_if_ready();
            wait += launching.elapsed();
        }
        let event = Event::BatchLoaded {
            epoch: self.plan.epoch(),
            batch: batch_index,
            samples,
            wait,
        };
        for observer in self.observers.iter() {
            observer.on_event(&event);
        }
        Some(Ok(batch))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.schedule.batches - self.delivered_batches) as usize;
        (0, Some(left))
    }
}

/// What `fit` checkpoints: the position after the batches delivered so far.
impl<O> PositionedBatches for Epoch<'_, O> {
    fn position(&self) -> Position {
        Epoch::position(self)
    }

    fn last_batch_samples(&self) -> u64 {
        self.last_batch_samples
    }

    fn data_key(&self) -> Option<Fingerprint> {
        self.data_key
    }
}

impl<O> Drop for Epoch<'_, O> {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        // Disconnecting the credits wakes the coordinator, which then exits.
        self.credits.take();
        if let Some(coordinator) = self.coordinator.take() {
            let _ = coordinator.join();
        }
    }
}

impl<O> std::fmt::Debug for Epoch<'_, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("epoch", &self.plan.epoch())
            .field("batches", &self.schedule.batches)
            .field("delivered_batches", &self.delivered_batches)
            .finish_non_exhaustive()
    }
}
