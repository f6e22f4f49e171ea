//! One epoch's batches and block uses, as the loader executes them.

use std::ops::Range;

use kiln_ml_core::{Block, BlockFinder, BlockIndex, BlockLayout, BlockUse, Plan};

use crate::{Error, Result};

/// The part of a plan an epoch delivers (all of it, or whole batches only with `drop_last`),
/// cut into batches, with the blocks it reads sorted by first use.
#[derive(Debug, Clone)]
pub(crate) struct EpochSchedule {
    /// Samples per batch: the plan's batch size, or for size-budget batches their mean
    /// (rounded up), which sizes the prefetch window.
    pub(crate) batch_size: u64,
    /// Where each batch ends, for size-budget batches (`None`: every `batch_size`).
    ends: Option<Vec<u64>>,
    /// Plan positions delivered: `0..positions`.
    pub(crate) positions: u64,
    pub(crate) batches: u64,
    /// Index of the epoch's first batch among all its batches: non-zero after a resume.
    pub(crate) first_batch: u64,
    /// Blocks read, sorted by first use (as the plan gives them).
    pub(crate) uses: Vec<BlockUse>,
    /// `(last_use, block)` sorted, to free blocks in order.
    pub(crate) by_last_use: Vec<(u64, BlockIndex)>,
}

impl EpochSchedule {
    pub(crate) fn new(plan: &Plan, drop_last: bool) -> Self {
        let len = plan.len() as u64;
        let batch_size = window_batch_size(plan);
        // Size-budget batches are whole by construction: `drop_last` keeps them all.
        let ends = plan.batch_ends().map(<[u64]>::to_vec);
        let positions = if drop_last && ends.is_none() {
            len / batch_size * batch_size
        } else {
            len
        };
        let batches = match &ends {
            Some(ends) => ends.len() as u64,
            None => positions.div_ceil(batch_size),
        };
        let uses: Vec<BlockUse> = plan
            .schedule()
            .iter()
            .filter(|used| used.first_use < positions)
            .copied()
            .collect();
        let mut by_last_use: Vec<(u64, BlockIndex)> = uses
            .iter()
            .map(|used| (used.last_use, used.block))
            .collect();
        by_last_use.sort_unstable();
        Self {
            batch_size,
            ends,
            positions,
            batches,
            first_batch: plan.batches_skipped(),
            uses,
            by_last_use,
        }
    }

    /// Plan positions of batch `batch`.
    pub(crate) fn batch_range(&self, batch: u64) -> Range<u64> {
        self.end_of_batches(batch)..self.end_of_batches(batch + 1)
    }

    /// The first plan position not needed by batches `0..batches`.
    pub(crate) fn end_of_batches(&self, batches: u64) -> u64 {
        match &self.ends {
            Some(ends) => batches.checked_sub(1).map_or(0, |last| {
                ends.get(last as usize).copied().unwrap_or(self.positions)
            }),
            None => batches.saturating_mul(self.batch_size).min(self.positions),
        }
    }

    /// How many blocks (a prefix of `uses`) are first used before `position`.
    pub(crate) fn uses_before(&self, position: u64) -> usize {
        self.uses.partition_point(|used| used.first_use < position)
    }

    /// The most samples any `count` consecutive batches hold: `count × batch_size` for
    /// fixed-size batches, the largest such window of size-budget batches.
    pub(crate) fn max_samples_of_batches(&self, count: u64) -> u64 {
        match &self.ends {
            None => count.saturating_mul(self.batch_size),
            Some(_) if count >= self.batches => self.positions,
            Some(_) => (0..=self.batches - count)
                .map(|first| self.end_of_batches(first + count) - self.end_of_batches(first))
                .max()
                .unwrap_or(0),
        }
    }

    /// The batch that holds plan position `position`.
    pub(crate) fn batch_of(&self, position: u64) -> u64 {
        match &self.ends {
            Some(ends) => ends.partition_point(|&end| end <= position) as u64,
            None => position / self.batch_size,
        }
    }
}

/// The samples per batch that size the prefetch window: the plan's batch size, or for
/// size-budget batches their mean (rounded up).
pub(crate) fn window_batch_size(plan: &Plan) -> u64 {
    match plan.batch_ends() {
        Some(ends) => (plan.len() as u64)
            .div_ceil(ends.len().max(1) as u64)
            .max(1),
        None => plan.batch_size(),
    }
}

/// Whether each plan position is the last occurrence of its sample, so the loader can move it
/// out of its block instead of cloning; `None` when no sample repeats (the usual case).
///
/// Fails when a sample id is outside the layout.
pub(crate) fn last_occurrences(
    order: &[u64],
    layout: &(impl BlockLayout + ?Sized),
) -> Result<Option<Vec<bool>>> {
    let samples = layout.num_samples();
    let mut seen = vec![0u64; samples.div_ceil(64) as usize];
    let mut repeats = false;
    for (position, &sample) in order.iter().enumerate() {
        if sample >= samples {
            return Err(Error::PlanMismatch {
                reason: format!(
                    "plan position {position} names sample {sample}, but the source has {samples}"
                ),
            });
        }
        let (word, bit) = ((sample / 64) as usize, 1u64 << (sample % 64));
        repeats |= seen[word] & bit != 0;
        seen[word] |= bit;
    }
    if !repeats {
        return Ok(None);
    }
    seen.fill(0);
    let mut last = vec![false; order.len()];
    for (position, &sample) in order.iter().enumerate().rev() {
        let (word, bit) = ((sample / 64) as usize, 1u64 << (sample % 64));
        last[position] = seen[word] & bit == 0;
        seen[word] |= bit;
    }
    Ok(Some(last))
}

/// Fails unless every plan position takes its sample from the block the source holds it in,
/// at a position where the plan's schedule says that block is in use (`finder` over `blocks`,
/// the source's). The coordinator reads and
/// frees blocks by the schedule but finds samples by the source's blocks: a plan made over
/// another block layout of the same samples (the same data with other row groups) would load
/// or fail depending on which read finished first. Samples outside the source are refused too
/// (where [`last_occurrences`] did not already).
pub(crate) fn check_block_uses(plan: &Plan, blocks: &[Block], finder: &BlockFinder) -> Result<()> {
    let mut in_use: Vec<Option<(u64, u64)>> = vec![None; blocks.len()];
    for used in plan.schedule() {
        let slot = in_use
            .get_mut(used.block as usize)
            .ok_or_else(|| Error::PlanMismatch {
                reason: format!(
                    "the plan reads block {}, but the source has {} blocks",
                    used.block,
                    blocks.len()
                ),
            })?;
        *slot = Some((used.first_use, used.last_use));
    }
    for (position, &sample) in plan.order().iter().enumerate() {
        let position = position as u64;
        let Some(block) = finder.find(sample) else {
            return Err(Error::PlanMismatch {
                reason: format!(
                    "plan position {position} names sample {sample}, but the source has {}",
                    blocks.last().map_or(0, |block| block.end())
                ),
            });
        };
        match in_use[block as usize] {
            Some((first, last)) if first <= position && position <= last => {}
            _ => {
                return Err(Error::PlanMismatch {
                    reason: format!(
                        "plan position {position} takes sample {sample}, which the source holds \
                         in block {block}, but the plan does not read that block there: the \
                         plan was made for another block layout"
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout, Shard};

    use super::*;

    fn layout(blocks: &[u64]) -> Layout {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"f"), blocks);
        builder.build().unwrap()
    }

    #[test]
    fn batches_cover_the_plan_and_drop_last_trims() {
        let layout = layout(&[4, 3]);
        let plan = Plan::new(0, Shard::SINGLE, 3, (0..7).collect(), &layout).unwrap();
        let all = EpochSchedule::new(&plan, false);
        assert_eq!(all.batches, 3);
        assert_eq!(all.batch_range(2), 6..7);
        let trimmed = EpochSchedule::new(&plan, true);
        assert_eq!(trimmed.batches, 2);
        assert_eq!(trimmed.batch_range(1), 3..6);
        assert_eq!(trimmed.uses_before(6), 2);
        assert_eq!(trimmed.uses_before(4), 1);
    }

    #[test]
    fn size_budget_batches_keep_their_ends_and_are_never_dropped() {
        let layout = layout(&[4, 3]);
        let plan = Plan::with_batch_ends(
            0,
            Shard::SINGLE,
            (0..7).collect(),
            vec![1, 5, 7],
            vec![1, 5, 7],
            &layout,
        )
        .unwrap();
        let schedule = EpochSchedule::new(&plan, true);
        assert_eq!((schedule.batches, schedule.batch_size), (3, 3));
        let ranges: Vec<_> = (0..3).map(|batch| schedule.batch_range(batch)).collect();
        assert_eq!(ranges, [0..1, 1..5, 5..7]);
        assert_eq!(
            (
                schedule.batch_of(0),
                schedule.batch_of(1),
                schedule.batch_of(6)
            ),
            (0, 1, 2)
        );
        assert_eq!(schedule.end_of_batches(0), 0);
        assert_eq!(schedule.end_of_batches(2), 5);
        // Batches of 1, 4 and 2 samples: the largest two in a row hold 6, all three 7.
        assert_eq!(schedule.max_samples_of_batches(1), 4);
        assert_eq!(schedule.max_samples_of_batches(2), 6);
        assert_eq!(schedule.max_samples_of_batches(5), 7);
    }

    #[test]
    fn repeats_are_moved_only_at_their_last_occurrence() {
        let layout = layout(&[4]);
        assert_eq!(last_occurrences(&[3, 1, 2, 0], &layout).unwrap(), None);
        let last = last_occurrences(&[3, 1, 3, 0, 1], &layout)
            .unwrap()
            .unwrap();
        assert_eq!(last, [false, false, true, true, true]);
        let error = last_occurrences(&[4], &layout).unwrap_err();
        assert!(error.to_string().contains("names sample 4"), "{error}");
    }
}
