//! Epoch plans: the emission order of one rank's samples and the block schedule behind it.

use crate::block_finder::BlockFinder;
use crate::{Block, BlockIndex, BlockLayout, Error, Position, Result, SampleId, Shard};

/// When the loader needs a block: the plan positions of its first and last use.
///
/// A loader reads the block before position `first_use` is emitted and may free it once
/// `last_use` has been emitted. Positions count from the start of the plan as it is now (after
/// any resume skip).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct BlockUse {
    /// The block.
    pub block: BlockIndex,
    /// Position of the first sample taken from the block.
    pub first_use: u64,
    /// Position of the last sample taken from the block (inclusive).
    pub last_use: u64,
}

/// One rank's plan for one epoch: which samples, in which order, from which blocks.
///
/// A plan is a pure value: samplers build it from the layout, seed, epoch and shard alone, and
/// loaders execute it. It never depends on worker count or timing.
///
/// # The sharding rule
///
/// The epoch has one global order, independent of the world size. It is cut into global batches
/// of `batch_size × world` samples; rank `r` takes the `r`-th run of `batch_size` samples of each.
/// So local position `p` of rank `r` is global position
/// `(p / batch_size) × batch_size × world + r × batch_size + p % batch_size`.
/// A [`Position`] counts global samples; it maps to a local offset exactly when it falls on a
/// global-batch boundary, and positions off a boundary are refused (the loader would otherwise
/// cut every later batch differently from an uninterrupted run). Resuming on a different world size
/// is therefore exact whenever the new global batch divides the consumed count, for instance when
/// the global batch size is kept and only the ranks change.
///
/// A plan of size-budget batches ([`with_batch_ends`](Self::with_batch_ends)) follows the same
/// rule with batches for samples: the global order is cut into batches of varying sample counts,
/// rank `r` takes the `r`-th batch of each run of `world`, and positions are the ends of runs.
///
/// ```
/// use kiln_ml_core::{Layout, Fingerprint, Plan, Position, Shard};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"f"), &[4, 4]);
/// let layout = builder.build().unwrap();
/// let plan = Plan::new(0, Shard::SINGLE, 2, vec![4, 5, 0, 1, 6, 7, 2, 3], &layout).unwrap();
/// assert_eq!(plan.schedule()[0].block, 1);
/// let resumed = plan.skip_to(Position { epoch: 0, consumed: 2 }).unwrap();
/// assert_eq!(resumed.order(), &[0, 1, 6, 7, 2, 3]);
/// ```
// Not `Deserialize`: a plan is regenerated from its request and a `Position`, never trusted
// from outside, because a hand-made one could break the invariants `Plan::new` checks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    epoch: u64,
    shard: Shard,
    batch_size: u64,
    already_consumed: u64,
    order: Vec<SampleId>,
    schedule: Vec<BlockUse>,
    /// Size-budget plans only (`None` otherwise): where this rank's remaining batches end.
    #[serde(skip_serializing_if = "Option::is_none")]
    bounds: Option<BatchBounds>,
}

/// Where the batches of a plan with batches of varying sample counts end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct BatchBounds {
    /// One past each remaining batch's last position in the plan's order (increasing, the last
    /// one the order's length).
    ends: Vec<u64>,
    /// For each remaining batch, the global samples consumed once it and its run's batches on
    /// the other ranks are done: the [`Position::consumed`] saved after it.
    global_ends: Vec<u64>,
    /// Batches skipped at the front when the plan was resumed.
    skipped: u64,
    /// Global samples consumed before the first remaining batch.
    consumed_before: u64,
}

impl Plan {
    /// Builds a plan from one rank's emission order, deriving the block schedule from the layout.
    ///
    /// `batch_size` is the per-rank batch size the order was sharded with (any value `>= 1` for a
    /// single rank). Fails if a sample id is not in the layout, or the layout's blocks do not
    /// tile their ids ([`validate_layout`](crate::validate_layout): a sample in a gap would be
    /// read from the next block).
    pub fn new(
        epoch: u64,
        shard: Shard,
        batch_size: u64,
        order: Vec<SampleId>,
        layout: &(impl BlockLayout + ?Sized),
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        crate::validate_layout(layout)?;
        let schedule = schedule_of(&order, layout.blocks())?;
        Ok(Self {
            epoch,
            shard,
            batch_size,
            already_consumed: 0,
            order,
            schedule,
            bounds: None,
        })
    }

    /// Builds a plan whose batches hold varying numbers of samples (size-budget batches): batch
    /// `k` is `order[ends[k-1]..ends[k]]`, and once it is consumed (with the batches of its run
    /// on the other ranks) the run has consumed `global_ends[k]` samples of the global order.
    ///
    /// The sharding rule is the fixed-size one with batches for samples: the global order is cut
    /// into batches, and rank `r` takes the `r`-th batch of each run of `world`. Resume positions
    /// are the ends of runs. One rank: `global_ends` equals `ends`.
    ///
    /// Fails unless `ends` increases strictly to `order.len()`, `global_ends` increases strictly
    /// with one entry per batch, and every sample is in the layout.
    ///
    /// ```
    /// use kiln_ml_core::{Fingerprint, Layout, Plan, Position, Shard};
    ///
    /// let mut builder = Layout::builder();
    /// builder.add_file(Fingerprint::of_bytes(b"f"), &[6]);
    /// let layout = builder.build().unwrap();
    /// let plan = Plan::with_batch_ends(0, Shard::SINGLE, vec![5, 0, 1, 2, 3, 4], vec![1, 4, 6], vec![1, 4, 6], &layout)
    ///     .unwrap();
    /// assert_eq!(plan.batch_count(), 3);
    /// assert_eq!(plan.batch_range(1), 1..4);
    /// assert_eq!(plan.position_after(4).unwrap(), Position { epoch: 0, consumed: 4 });
    /// assert!(plan.position_after(2).is_err(), "inside a batch");
    /// let resumed = plan.skip_to(Position { epoch: 0, consumed: 1 }).unwrap();
    /// assert_eq!((resumed.batches_skipped(), resumed.batch_range(0)), (1, 0..3));
    /// ```
    pub fn with_batch_ends(
        epoch: u64,
        shard: Shard,
        order: Vec<SampleId>,
        ends: Vec<u64>,
        global_ends: Vec<u64>,
        layout: &(impl BlockLayout + ?Sized),
    ) -> Result<Self> {
        let invalid = |reason: String| Err(Error::InvalidConfig(reason));
        if ends.len() != global_ends.len() {
            return invalid(format!(
                "{} batch ends but {} global ends: one of each per batch",
                ends.len(),
                global_ends.len()
            ));
        }
        if ends.last().copied().unwrap_or(0) != order.len() as u64 {
            return invalid(format!(
                "the last batch ends at {:?}, but the order has {} samples",
                ends.last(),
                order.len()
            ));
        }
        for (name, values) in [("batch", &ends), ("global", &global_ends)] {
            let mut previous = 0;
            for (batch, &end) in values.iter().enumerate() {
                if end <= previous {
                    return invalid(format!(
                        "{name} ends must increase: batch {batch} ends at {end}, after {previous}"
                    ));
                }
                previous = end;
            }
        }
        let largest = ends
            .iter()
            .scan(0, |start, &end| Some(end - std::mem::replace(start, end)))
            .max()
            .unwrap_or(1);
        let mut plan = Self::new(epoch, shard, largest, order, layout)?;
        plan.bounds = Some(BatchBounds {
            ends,
            global_ends,
            skipped: 0,
            consumed_before: 0,
        });
        Ok(plan)
    }

    /// The epoch this plan is for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The shard this plan is for.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The per-rank batch size the plan was sharded with; for a plan of size-budget batches
    /// ([`with_batch_ends`](Self::with_batch_ends)), its largest batch's sample count.
    pub fn batch_size(&self) -> u64 {
        self.batch_size
    }

    /// Where each remaining batch ends (one past its last position in [`order`](Self::order)),
    /// when the batches hold varying numbers of samples (see
    /// [`with_batch_ends`](Self::with_batch_ends)); `None` for fixed-size batches.
    pub fn batch_ends(&self) -> Option<&[u64]> {
        self.bounds.as_ref().map(|bounds| bounds.ends.as_slice())
    }

    /// Batches left in the plan (the last one may be short in a fixed-size plan).
    pub fn batch_count(&self) -> u64 {
        match &self.bounds {
            Some(bounds) => bounds.ends.len() as u64,
            None => (self.order.len() as u64).div_ceil(self.batch_size),
        }
    }

    /// The positions of batch `batch` (counted from the plan's current start) in
    /// [`order`](Self::order); empty past the last batch.
    pub fn batch_range(&self, batch: u64) -> std::ops::Range<u64> {
        let len = self.order.len() as u64;
        match &self.bounds {
            Some(bounds) => {
                let end_of = |index: u64| bounds.ends.get(index as usize).copied().unwrap_or(len);
                let start = batch.checked_sub(1).map_or(0, end_of);
                start..end_of(batch)
            }
            None => {
                let start = batch.saturating_mul(self.batch_size).min(len);
                start..start.saturating_add(self.batch_size).min(len)
            }
        }
    }

    /// The batch that holds plan position `position`.
    pub fn batch_of(&self, position: u64) -> u64 {
        match &self.bounds {
            Some(bounds) => bounds.ends.partition_point(|&end| end <= position) as u64,
            None => position / self.batch_size,
        }
    }

    /// Batches skipped at the front when the plan was resumed: the index, among all the
    /// epoch's batches of this rank, of the plan's first batch.
    pub fn batches_skipped(&self) -> u64 {
        match &self.bounds {
            Some(bounds) => bounds.skipped,
            None => self.already_consumed / self.batch_size,
        }
    }

    /// Samples of this rank's plan skipped at the front when it was resumed.
    pub fn already_consumed(&self) -> u64 {
        self.already_consumed
    }

    /// The samples still to emit, in order.
    pub fn order(&self) -> &[SampleId] {
        &self.order
    }

    /// Number of samples still to emit.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is left to emit.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The blocks the remaining samples come from, sorted by first use.
    pub fn schedule(&self) -> &[BlockUse] {
        &self.schedule
    }

    /// Heap bytes held by the plan (order, schedule and batch ends).
    pub fn heap_bytes(&self) -> usize {
        let bounds = self.bounds.as_ref().map_or(0, |bounds| {
            (bounds.ends.capacity() + bounds.global_ends.capacity()) * size_of::<u64>()
        });
        self.order.capacity() * size_of::<SampleId>()
            + self.schedule.capacity() * size_of::<BlockUse>()
            + bounds
    }

    /// The position to save after `delivered` samples of this plan have been consumed.
    ///
    /// Delivering the whole plan gives the start of the next epoch. Otherwise `delivered` must
    /// end on a batch boundary: resuming mid-batch would cut every later batch differently.
    pub fn position_after(&self, delivered: u64) -> Result<Position> {
        let invalid = |reason: String| Error::InvalidPosition {
            position: Position {
                epoch: self.epoch,
                consumed: delivered,
            },
            plan_epoch: self.epoch,
            reason,
        };
        if delivered > self.len() as u64 {
            return Err(invalid(format!(
                "only {} samples remain in the plan",
                self.len()
            )));
        }
        if delivered == self.len() as u64 {
            return Ok(Position::start_of(self.epoch + 1));
        }
        if let Some(bounds) = &self.bounds {
            return match bounds.ends.binary_search(&delivered) {
                Ok(batch) => Ok(Position {
                    epoch: self.epoch,
                    consumed: bounds.global_ends[batch],
                }),
                Err(_) if delivered == 0 => Ok(Position {
                    epoch: self.epoch,
                    consumed: bounds.consumed_before,
                }),
                Err(_) => Err(invalid(format!(
                    "{delivered} samples end inside batch {} of this plan's size-budget batches: \
                     resume only at batch boundaries",
                    self.batch_of(delivered)
                ))),
            };
        }
        let local = self.already_consumed + delivered;
        let world = u64::from(self.shard.world());
        if !local.is_multiple_of(self.batch_size) {
            return Err(invalid(format!(
                "{local} is not a multiple of the batch size {}: resume only at batch boundaries",
                self.batch_size
            )));
        }
        Ok(Position {
            epoch: self.epoch,
            consumed: local * world,
        })
    }

    /// The plan that remains after `position`: the consumed prefix dropped, the schedule shifted.
    ///
    /// The remaining order is exactly the suffix an uninterrupted run would still emit.
    pub fn skip_to(mut self, position: Position) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidPosition {
            position,
            plan_epoch: self.epoch,
            reason,
        };
        if position.epoch != self.epoch {
            return Err(invalid("the position is for another epoch".to_owned()));
        }
        if self.bounds.is_some() {
            return self.skip_batches_to(position);
        }
        let world = u64::from(self.shard.world());
        let global_batch = self.batch_size.checked_mul(world).ok_or_else(|| {
            invalid(format!(
                "the global batch ({} x {world} ranks) overflows u64",
                self.batch_size
            ))
        })?;
        // Off a batch boundary the loader would cut every later batch differently from an
        // uninterrupted run, so such positions are refused, on one rank as on many.
        let local = if position.consumed.is_multiple_of(global_batch) {
            position.consumed / world
        } else {
            return Err(invalid(format!(
                "{} consumed samples do not fall on a global batch boundary ({} x {} ranks)",
                position.consumed, self.batch_size, world
            )));
        };
        if local < self.already_consumed {
            return Err(invalid(format!(
                "the plan already starts after {} local samples",
                self.already_consumed
            )));
        }
        let skip = local - self.already_consumed;
        if skip > self.order.len() as u64 {
            // Past this rank's share: nothing left (a rank of an uneven tail).
            return Err(invalid(format!(
                "this rank's plan has only {} samples",
                self.already_consumed + self.order.len() as u64
            )));
        }
        self.drop_prefix(skip);
        Ok(self)
    }

    /// [`skip_to`](Self::skip_to) for size-budget batches: `position` must end a run of them.
    fn skip_batches_to(mut self, position: Position) -> Result<Self> {
        let bounds = self.bounds.as_mut().expect("a plan with batch ends");
        if position.consumed == bounds.consumed_before {
            return Ok(self);
        }
        let Ok(batch) = bounds.global_ends.binary_search(&position.consumed) else {
            return Err(Error::InvalidPosition {
                position,
                plan_epoch: self.epoch,
                reason: format!(
                    "{} consumed samples do not end a run of this plan's size-budget batches \
                     (the plan starts after {})",
                    position.consumed, bounds.consumed_before
                ),
            });
        };
        let skip = bounds.ends[batch];
        bounds.ends.drain(..=batch);
        bounds.global_ends.drain(..=batch);
        for end in &mut bounds.ends {
            *end -= skip;
        }
        bounds.skipped += batch as u64 + 1;
        bounds.consumed_before = position.consumed;
        self.drop_prefix(skip);
        Ok(self)
    }

    /// Drops the first `skip` positions of the order and shifts the schedule.
    fn drop_prefix(&mut self, skip: u64) {
        self.order.drain(..skip as usize);
        self.schedule.retain(|used| used.last_use >= skip);
        for used in &mut self.schedule {
            used.first_use = used.first_use.saturating_sub(skip);
            used.last_use -= skip;
        }
        // A block whose first use was cut keeps its place: still sorted by first use, ties first.
        self.schedule
            .sort_by_key(|used| (used.first_use, used.block));
        self.already_consumed += skip;
    }
}

/// First and last use of every block the order touches, sorted by first use.
fn schedule_of(order: &[SampleId], blocks: &[Block]) -> Result<Vec<BlockUse>> {
    let samples = blocks.last().map_or(0, Block::end);
    let mut uses: Vec<Option<(u64, u64)>> = vec![None; blocks.len()];
    let finder = BlockFinder::new(blocks);
    for (position, &sample) in order.iter().enumerate() {
        let block = finder.find(sample).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "plan position {position} names sample {sample}, but the layout has {samples} samples"
            ))
        })?;
        let position = position as u64;
        let entry = &mut uses[block as usize];
        match entry {
            Some((_, last)) => *last = position,
            None => *entry = Some((position, position)),
        }
    }
    let mut schedule: Vec<BlockUse> = uses
        .into_iter()
        .enumerate()
        .filter_map(|(block, used)| {
            used.map(|(first_use, last_use)| BlockUse {
                block: block as BlockIndex,
                first_use,
                last_use,
            })
        })
        .collect();
    schedule.sort_by_key(|used| (used.first_use, used.block));
    Ok(schedule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fingerprint, Layout};

    fn layout(block_rows: &[u64]) -> Layout {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"file"), block_rows);
        builder.build().unwrap()
    }

    #[test]
    fn a_global_batch_that_overflows_is_an_error_not_a_panic() {
        let plan = Plan::new(
            0,
            crate::Shard::new(0, 2).unwrap(),
            u64::MAX / 2 + 1,
            vec![0],
            &layout(&[1]),
        )
        .unwrap();
        let error = plan.skip_to(crate::Position::start_of(0)).unwrap_err();
        assert!(error.to_string().contains("overflows"), "{error}");
    }

    #[test]
    fn schedule_records_first_and_last_use() {
        let layout = layout(&[2, 2, 2]);
        let plan = Plan::new(0, Shard::SINGLE, 1, vec![2, 0, 3, 1, 4, 5], &layout).unwrap();
        let expected = [
            BlockUse {
                block: 1,
                first_use: 0,
                last_use: 2,
            },
            BlockUse {
                block: 0,
                first_use: 1,
                last_use: 3,
            },
            BlockUse {
                block: 2,
                first_use: 4,
                last_use: 5,
            },
        ];
        assert_eq!(plan.schedule(), &expected);
    }

    #[test]
    fn unknown_samples_are_rejected_with_their_position() {
        let error = Plan::new(0, Shard::SINGLE, 1, vec![0, 9], &layout(&[2])).unwrap_err();
        assert!(
            error.to_string().contains("plan position 1 names sample 9"),
            "{error}"
        );
    }

    /// A layout of your own whose blocks leave a gap in the ids: a sample in the gap would be
    /// scheduled in the next block, and read as another sample's row.
    #[test]
    fn layouts_that_do_not_tile_their_ids_are_refused() {
        struct Gapped(Vec<Block>);
        impl BlockLayout for Gapped {
            fn blocks(&self) -> &[Block] {
                &self.0
            }
            fn fingerprint(&self) -> crate::Fingerprint {
                crate::Fingerprint::of_bytes(b"gapped")
            }
        }
        let block = |first_sample, rows| Block {
            file: 0,
            index_in_file: 0,
            first_sample,
            rows,
        };
        let gapped = Gapped(vec![block(0, 4), block(6, 2)]);
        let error = Plan::new(0, Shard::SINGLE, 1, vec![4, 5], &gapped).unwrap_err();
        assert!(error.to_string().contains("starts at sample 6"), "{error}");
    }

    #[test]
    fn skip_drops_the_prefix_and_shifts_the_schedule() {
        let layout = layout(&[2, 2, 2]);
        let plan = Plan::new(3, Shard::SINGLE, 1, vec![2, 0, 3, 1, 4, 5], &layout).unwrap();
        let resumed = plan
            .skip_to(Position {
                epoch: 3,
                consumed: 3,
            })
            .unwrap();
        assert_eq!(resumed.order(), &[1, 4, 5]);
        assert_eq!(resumed.already_consumed(), 3);
        let blocks: Vec<_> = resumed
            .schedule()
            .iter()
            .map(|used| (used.block, used.first_use, used.last_use))
            .collect();
        assert_eq!(blocks, vec![(0, 0, 0), (2, 1, 2)]);
        assert_eq!(
            resumed.position_after(1).unwrap(),
            Position {
                epoch: 3,
                consumed: 4
            }
        );
        assert_eq!(resumed.position_after(3).unwrap(), Position::start_of(4));
    }

    #[test]
    fn multi_rank_positions_count_global_samples() {
        let layout = layout(&[16]);
        let shard = Shard::new(1, 2).unwrap();
        // Rank 1 of 2 with batch 2 takes global positions 2,3, 6,7, 10,11, 14,15.
        let plan = Plan::new(0, shard, 2, vec![2, 3, 6, 7, 10, 11, 14, 15], &layout).unwrap();
        assert_eq!(plan.position_after(4).unwrap().consumed, 8);
        assert!(plan.position_after(3).is_err());
        let resumed = plan
            .skip_to(Position {
                epoch: 0,
                consumed: 8,
            })
            .unwrap();
        assert_eq!(resumed.order(), &[10, 11, 14, 15]);
        let off_boundary = Plan::new(0, shard, 2, vec![2, 3], &layout)
            .unwrap()
            .skip_to(Position {
                epoch: 0,
                consumed: 2,
            });
        assert!(matches!(off_boundary, Err(Error::InvalidPosition { .. })));
    }

    #[test]
    fn single_rank_positions_must_fall_on_batch_boundaries() {
        let plan = Plan::new(0, Shard::SINGLE, 4, (0..12).collect(), &layout(&[12])).unwrap();
        assert_eq!(plan.position_after(8).unwrap().consumed, 8);
        assert!(plan.position_after(6).is_err());
        let error = plan
            .skip_to(Position {
                epoch: 0,
                consumed: 6,
            })
            .unwrap_err();
        assert!(error.to_string().contains("batch boundary"), "{error}");
    }

    #[test]
    fn wrong_epoch_is_rejected() {
        let plan = Plan::new(1, Shard::SINGLE, 1, vec![0], &layout(&[1])).unwrap();
        let error = plan.skip_to(Position::start_of(2)).unwrap_err();
        assert!(error.to_string().contains("another epoch"), "{error}");
    }

    #[test]
    fn size_budget_batches_resume_at_run_ends_on_every_rank() {
        let layout = layout(&[10]);
        // Global batches [0..3) [3..4) [4..8) [8..10) on two ranks: rank 1 takes the second of
        // each run of two, runs ending at global positions 4 and 10.
        let shard = Shard::new(1, 2).unwrap();
        let plan = Plan::with_batch_ends(2, shard, vec![3, 8, 9], vec![1, 3], vec![4, 10], &layout)
            .unwrap();
        assert_eq!(plan.batch_size(), 2, "the largest batch");
        assert_eq!(
            (plan.batch_count(), plan.batch_of(0), plan.batch_of(1)),
            (2, 0, 1)
        );
        assert_eq!(plan.batch_range(1), 1..3);
        assert_eq!(plan.batch_range(2), 3..3);
        assert_eq!(plan.position_after(1).unwrap().consumed, 4);
        assert_eq!(plan.position_after(3).unwrap(), Position::start_of(3));
        let error = plan.position_after(2).unwrap_err();
        assert!(error.to_string().contains("inside batch 1"), "{error}");
        let position = |consumed| Position { epoch: 2, consumed };
        let resumed = plan.clone().skip_to(position(4)).unwrap();
        assert_eq!(resumed.order(), &[8, 9]);
        assert_eq!((resumed.batches_skipped(), resumed.batch_count()), (1, 1));
        assert_eq!(resumed.position_after(0).unwrap().consumed, 4);
        assert_eq!(resumed.schedule()[0].first_use, 0);
        // Resuming at its own start is a no-op; inside a run, refused.
        assert_eq!(resumed.clone().skip_to(position(4)).unwrap(), resumed);
        let error = plan.skip_to(position(3)).unwrap_err();
        assert!(error.to_string().contains("do not end a run"), "{error}");
    }

    #[test]
    fn batch_ends_that_do_not_tile_the_order_are_refused() {
        let layout = layout(&[4]);
        let make = |ends: Vec<u64>, global: Vec<u64>| {
            Plan::with_batch_ends(0, Shard::SINGLE, vec![0, 1, 2, 3], ends, global, &layout)
                .map(|_| ())
                .map_err(|error| error.to_string())
        };
        assert_eq!(make(vec![2, 4], vec![2, 4]), Ok(()));
        assert!(
            make(vec![2, 3], vec![2, 3])
                .unwrap_err()
                .contains("order has 4")
        );
        assert!(
            make(vec![2, 2, 4], vec![2, 3, 4])
                .unwrap_err()
                .contains("batch 1 ends at 2")
        );
        assert!(
            make(vec![0, 4], vec![1, 4])
                .unwrap_err()
                .contains("batch 0 ends at 0")
        );
        assert!(
            make(vec![4], vec![2, 4])
                .unwrap_err()
                .contains("one of each")
        );
    }

    #[test]
    fn zero_batch_size_is_rejected() {
        let error = Plan::new(0, Shard::SINGLE, 0, vec![], &layout(&[1])).unwrap_err();
        assert_eq!(error, Error::ZeroBatchSize);
    }
}
