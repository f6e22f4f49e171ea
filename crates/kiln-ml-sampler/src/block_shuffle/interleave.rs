//! The K-way interleave of open blocks that feeds the shuffle buffer.

use std::ops::Range;

use kiln_ml_core::{Block, BlockIndex, SampleId};

use super::weights::LaneWeights;
use crate::rng::PlanRng;

/// One open slot: the block being read and the blocks still queued for it.
#[derive(Debug)]
struct Lane {
    /// Blocks this lane will read, in order; `next` indexes the first one not yet opened.
    queue: Vec<BlockIndex>,
    next: usize,
    /// The unread samples of the open block.
    open: Range<SampleId>,
}

impl Lane {
    fn new(queue: Vec<BlockIndex>) -> Self {
        Self {
            queue,
            next: 0,
            open: 0..0,
        }
    }

    /// Opens the next queued block; returns its rows, or `None` when the queue is done.
    fn open_next(&mut self, blocks: &[Block]) -> Option<u64> {
        let block = blocks[*self.queue.get(self.next)? as usize];
        self.next += 1;
        self.open = block.samples();
        Some(block.rows)
    }
}

/// Appends to `out` every sample of the non-empty `blocks`, read `open_blocks` blocks at a time.
///
/// Each next sample comes from an open lane chosen with probability proportional to its weight,
/// and inside a block samples follow row order, so each block is read front to back.
///
/// - `stratified`: the non-empty blocks are cut, in layout order, into `open_blocks` strata of
///   about equal rows; lane `i` reads stratum `i`'s blocks in a Fisher-Yates order and is
///   weighted by all the rows it has left. All lanes therefore progress at the same pace, every
///   stretch of the epoch mixes blocks from every part of the layout, and the epoch order keeps
///   no trace of the layout order (Spearman correlation near zero even with few blocks).
/// - not stratified: all blocks in one Fisher-Yates order; the next block opens in whichever
///   lane empties first, and lanes are weighted by the rows left in their open block.
pub(crate) fn interleave(
    blocks: &[Block],
    open_blocks: usize,
    stratified: bool,
    block_rng: &mut PlanRng,
    pick_rng: &mut PlanRng,
    out: &mut Vec<SampleId>,
) {
    let non_empty: Vec<BlockIndex> = (0..blocks.len())
        .filter(|&index| blocks[index].rows > 0)
        .map(|index| index as BlockIndex)
        .collect();
    if non_empty.is_empty() {
        return;
    }
    let lanes_wanted = open_blocks.clamp(1, non_empty.len());
    if stratified {
        let mut lanes = strata(blocks, &non_empty, lanes_wanted);
        for lane in &mut lanes {
            block_rng.shuffle(&mut lane.queue);
        }
        run_stratified(blocks, lanes, pick_rng, out);
    } else {
        let mut queue = non_empty;
        block_rng.shuffle(&mut queue);
        run_shared_queue(blocks, queue, lanes_wanted, pick_rng, out);
    }
}

/// Cuts the non-empty blocks into `lanes` contiguous strata of about equal rows (a block goes to
/// the stratum that holds its midpoint); strata left empty by big blocks are dropped.
fn strata(blocks: &[Block], non_empty: &[BlockIndex], lanes: usize) -> Vec<Lane> {
    let first = blocks[non_empty[0] as usize].first_sample;
    let last = blocks[*non_empty.last().unwrap_or(&0) as usize].end();
    let span = u128::from(last - first);
    let mut queues: Vec<Vec<BlockIndex>> = vec![Vec::new(); lanes];
    for &index in non_empty {
        let block = blocks[index as usize];
        let twice_midpoint = 2 * u128::from(block.first_sample - first) + u128::from(block.rows);
        let stratum = (lanes as u128 * twice_midpoint / (2 * span)) as usize;
        queues[stratum.min(lanes - 1)].push(index);
    }
    queues
        .into_iter()
        .filter(|queue| !queue.is_empty())
        .map(Lane::new)
        .collect()
}

/// Stratified run: lanes weighted by all their remaining rows.
fn run_stratified(
    blocks: &[Block],
    mut lanes: Vec<Lane>,
    rng: &mut PlanRng,
    out: &mut Vec<SampleId>,
) {
    let weights: Vec<u64> = lanes
        .iter()
        .map(|lane| lane.queue.iter().map(|&b| blocks[b as usize].rows).sum())
        .collect();
    let mut weights = LaneWeights::new(weights);
    for lane in &mut lanes {
        lane.open_next(blocks);
    }
    while weights.total() > 0 {
        let index = weights.pick(rng);
        let lane = &mut lanes[index];
        out.push(lane.open.start);
        lane.open.start += 1;
        if lane.open.is_empty() {
            // The lane's weight already counts the rows of its queued blocks.
            lane.open_next(blocks);
        }
        weights.take_one(index);
    }
}

/// Shared-queue run: lanes weighted by the rows left in their open block.
fn run_shared_queue(
    blocks: &[Block],
    queue: Vec<BlockIndex>,
    lanes: usize,
    rng: &mut PlanRng,
    out: &mut Vec<SampleId>,
) {
    let mut shared = Lane::new(queue);
    let mut open: Vec<Range<SampleId>> = Vec::with_capacity(lanes);
    let mut weights = Vec::with_capacity(lanes);
    for _ in 0..lanes {
        let rows = shared.open_next(blocks).unwrap_or(0);
        open.push(shared.open.clone());
        weights.push(rows);
    }
    let queued = shared.queue[shared.next..]
        .iter()
        .map(|&block| blocks[block as usize].rows)
        .sum();
    let mut weights = LaneWeights::with_queued(weights, queued);
    while weights.total() > 0 {
        let index = weights.pick(rng);
        let range = &mut open[index];
        out.push(range.start);
        range.start += 1;
        weights.take_one(index);
        if range.is_empty()
            && let Some(rows) = shared.open_next(blocks)
        {
            *range = shared.open.clone();
            weights.refill(index, rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{BlockLayout, Fingerprint, Layout};

    use super::*;
    use crate::rng::Purpose;

    fn layout(files: &[&[u64]]) -> Layout {
        let mut builder = Layout::builder();
        for (index, rows) in files.iter().enumerate() {
            builder.add_file(Fingerprint::builder().u64(index as u64).finish(), rows);
        }
        builder.build().unwrap()
    }

    fn run(layout: &Layout, open_blocks: usize, stratified: bool) -> Vec<SampleId> {
        let mut block_rng = PlanRng::new(3, 0, Purpose::BlockOrder);
        let mut pick_rng = PlanRng::new(3, 0, Purpose::Interleave);
        let mut out = Vec::new();
        interleave(
            layout.blocks(),
            open_blocks,
            stratified,
            &mut block_rng,
            &mut pick_rng,
            &mut out,
        );
        out
    }

    /// Within each block, samples must come out in row order.
    fn rows_in_order(layout: &Layout, order: &[SampleId]) -> bool {
        let mut last_seen: Vec<Option<SampleId>> = vec![None; layout.num_blocks()];
        order.iter().all(|&sample| {
            let block = layout.block_of(sample).unwrap() as usize;
            let in_order = last_seen[block].is_none_or(|previous| previous + 1 == sample);
            last_seen[block] = Some(sample);
            in_order
        })
    }

    #[test]
    fn every_sample_once_with_blocks_read_front_to_back() {
        let layout = layout(&[&[5, 0, 3], &[], &[8], &[1, 1, 1], &[20]]);
        for stratified in [true, false] {
            for open_blocks in [1, 2, 3, 100] {
                let order = run(&layout, open_blocks, stratified);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(
                    sorted,
                    (0..39).collect::<Vec<_>>(),
                    "{open_blocks} {stratified}"
                );
                assert!(rows_in_order(&layout, &order), "{order:?}");
            }
        }
    }

    #[test]
    fn one_open_block_reads_whole_blocks_in_a_permuted_order() {
        let layout = layout(&[&[4], &[4], &[4], &[4]]);
        let order = run(&layout, 1, false);
        let starts: Vec<SampleId> = order.chunks(4).map(|chunk| chunk[0]).collect();
        for chunk in order.chunks(4) {
            assert_eq!(chunk, &[chunk[0], chunk[0] + 1, chunk[0] + 2, chunk[0] + 3]);
        }
        let mut sorted = starts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 4, 8, 12]);
    }

    #[test]
    fn strata_are_contiguous_and_balanced_by_rows() {
        let layout = layout(&[&[10, 10, 10, 10], &[40], &[5, 5, 5, 5, 5, 5, 5, 5]]);
        let non_empty: Vec<BlockIndex> = (0..layout.num_blocks() as BlockIndex).collect();
        let lanes = strata(layout.blocks(), &non_empty, 3);
        let queues: Vec<Vec<BlockIndex>> = lanes.into_iter().map(|lane| lane.queue).collect();
        assert_eq!(
            queues,
            vec![vec![0, 1, 2, 3], vec![4], vec![5, 6, 7, 8, 9, 10, 11, 12]]
        );
        // One giant block leaves the strata it covers empty; they are dropped.
        let giant = layout_with_giant();
        let non_empty: Vec<BlockIndex> = (0..giant.num_blocks() as BlockIndex).collect();
        let lanes = strata(giant.blocks(), &non_empty, 8);
        let total: usize = lanes.iter().map(|lane| lane.queue.len()).sum();
        assert_eq!(total, 3);
        assert!(lanes.len() <= 3);
    }

    fn layout_with_giant() -> Layout {
        layout(&[&[1], &[1000], &[1]])
    }

    #[test]
    fn stratified_lanes_progress_together() {
        // Two strata of 1000 rows each: halfway through, each has given about half its rows.
        let layout = layout(&[&[100; 10], &[100; 10]]);
        let order = run(&layout, 2, true);
        let first_half_from_second = order[..1000].iter().filter(|&&s| s >= 1000).count();
        // Hypergeometric: mean 500, sd ~11.
        assert!(
            (first_half_from_second as i64 - 500).abs() < 80,
            "{first_half_from_second}"
        );
    }
}
