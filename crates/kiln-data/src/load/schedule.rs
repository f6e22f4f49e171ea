//! One epoch's batches and block uses, as the loader executes them; and its memory bound.

use std::ops::Range;

use kiln_core::{BlockIndex, BlockLayout, BlockUse, Plan};

use crate::{Error, Result};

/// The part of a plan an epoch delivers (all of it, or whole batches only with `drop_last`),
/// cut into batches, with the blocks it reads sorted by first use.
#[derive(Debug, Clone)]
pub(crate) struct EpochSchedule {
    pub(crate) batch_size: u64,
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
        let batch_size = plan.batch_size();
        let len = plan.len() as u64;
        let positions = if drop_last {
            len / batch_size * batch_size
        } else {
            len
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
            positions,
            batches: positions.div_ceil(batch_size),
            first_batch: plan.already_consumed() / batch_size,
            uses,
            by_last_use,
        }
    }

    /// Plan positions of batch `batch`.
    pub(crate) fn batch_range(&self, batch: u64) -> Range<u64> {
        let start = batch * self.batch_size;
        start..(start + self.batch_size).min(self.positions)
    }

    /// The first plan position not needed by batches `0..batches`.
    pub(crate) fn end_of_batches(&self, batches: u64) -> u64 {
        batches.saturating_mul(self.batch_size).min(self.positions)
    }

    /// How many blocks (a prefix of `uses`) are first used before `position`.
    pub(crate) fn uses_before(&self, position: u64) -> usize {
        self.uses.partition_point(|used| used.first_use < position)
    }

    /// The batch that first needs a block's samples.
    pub(crate) fn batch_of(&self, position: u64) -> u64 {
        position / self.batch_size
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

/// An upper bound on what a loader holds in memory while executing a plan; see
/// [`Loader::memory_bound`](crate::Loader::memory_bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryBound {
    /// Most blocks resident at once for the batches within the prefetch window.
    pub peak_window_blocks: u64,
    /// Most source samples resident at once in those blocks.
    pub peak_window_samples: u64,
    /// Samples of blocks read ahead of the window: at most `read_ahead_blocks` blocks (the
    /// largest ones are counted).
    pub read_ahead_samples: u64,
    /// Samples held in assembled batches not yet handed over (prefetch depth × batch size).
    pub batch_samples: u64,
}

impl MemoryBound {
    /// Source samples held at most (window, read-ahead and assembled batches together).
    pub fn max_samples(&self) -> u64 {
        self.peak_window_samples + self.read_ahead_samples + self.batch_samples
    }

    /// The bound for a schedule: a block is held from when the prefetch window first reaches
    /// it until the batch holding its last use is assembled.
    pub(crate) fn of(
        schedule: &EpochSchedule,
        layout: &(impl BlockLayout + ?Sized),
        prefetch_batches: u64,
        read_ahead_blocks: usize,
    ) -> Self {
        let batches = schedule.batches as usize;
        let mut block_delta = vec![0i64; batches + 1];
        let mut sample_delta = vec![0i64; batches + 1];
        let mut rows_by_size = Vec::with_capacity(schedule.uses.len());
        for used in &schedule.uses {
            let rows = layout.blocks()[used.block as usize].rows;
            rows_by_size.push(rows);
            // Held while the consumer is at batch c with
            // first_use < (c + prefetch) × batch size and last_use >= c × batch size.
            let first = (schedule.batch_of(used.first_use) + 1).saturating_sub(prefetch_batches);
            let last = schedule
                .batch_of(used.last_use)
                .min(schedule.batches.saturating_sub(1));
            if first > last {
                continue;
            }
            block_delta[first as usize] += 1;
            block_delta[last as usize + 1] -= 1;
            sample_delta[first as usize] += rows as i64;
            sample_delta[last as usize + 1] -= rows as i64;
        }
        let peak = |delta: &[i64]| {
            delta
                .iter()
                .scan(0i64, |held, change| {
                    *held += change;
                    Some(*held)
                })
                .max()
                .unwrap_or(0)
                .max(0) as u64
        };
        rows_by_size.sort_unstable_by(|a, b| b.cmp(a));
        Self {
            peak_window_blocks: peak(&block_delta),
            peak_window_samples: peak(&sample_delta),
            read_ahead_samples: rows_by_size.iter().take(read_ahead_blocks).sum(),
            batch_samples: prefetch_batches * schedule.batch_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_core::{Fingerprint, Layout, Shard};

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

    #[test]
    fn sequential_plans_hold_few_blocks_and_random_ones_many() {
        let layout = layout(&[10; 10]);
        let sequential = Plan::new(0, Shard::SINGLE, 5, (0..100).collect(), &layout).unwrap();
        let bound = MemoryBound::of(&EpochSchedule::new(&sequential, false), &layout, 2, 1);
        assert_eq!(bound.peak_window_blocks, 2);
        assert_eq!(bound.read_ahead_samples, 10);
        assert_eq!(bound.batch_samples, 10);
        // Striding over every block: each block lives almost the whole epoch.
        let strided: Vec<u64> = (0..10)
            .flat_map(|row| (0..10).map(move |b| b * 10 + row))
            .collect();
        let strided = Plan::new(0, Shard::SINGLE, 5, strided, &layout).unwrap();
        let bound = MemoryBound::of(&EpochSchedule::new(&strided, false), &layout, 2, 1);
        assert_eq!(bound.peak_window_blocks, 10);
        assert_eq!(bound.peak_window_samples, 100);
    }
}
