//! Constant-time lookup of the block holding a sample, for plan schedules and loaders.

use crate::{Block, BlockIndex, SampleId};

/// Maps sample ids to blocks with a table of buckets: bucket `i` covers sample ids
/// `[i << shift, (i + 1) << shift)` and records the first block that reaches into it, so a
/// lookup is one table read, a branch-free pick between that block and the next (one of them
/// holds nearly every sample), and otherwise a binary search over the few blocks of one bucket.
///
/// A plain binary search over all blocks costs a cache miss and a mispredicted branch per level
/// (17 levels for 100K blocks), which dominates when consecutive lookups come from different
/// blocks, as they do in a shuffled plan. Plans build their schedule with it; loaders use it to
/// place every sample of a batch.
///
/// ```
/// use kiln_ml_core::{BlockFinder, BlockLayout, Fingerprint, Layout};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"f"), &[3, 0, 5]);
/// let layout = builder.build().unwrap();
/// let finder = BlockFinder::new(layout.blocks());
/// assert_eq!(finder.find(4), Some(2)); // the empty block 1 is never returned
/// assert_eq!(finder.find(8), None);
/// ```
#[derive(Debug, Clone)]
pub struct BlockFinder {
    /// One past the last sample of each block.
    ends: Vec<SampleId>,
    shift: u32,
    /// `first_block[i]`: index of the first block whose end is past the bucket's first id.
    first_block: Vec<u32>,
}

impl BlockFinder {
    /// A finder for a tiling block list (see [`validate_layout`](crate::validate_layout)), with
    /// about two to four buckets per block.
    pub fn new(blocks: &[Block]) -> Self {
        let ends: Vec<SampleId> = blocks.iter().map(Block::end).collect();
        let samples = ends.last().copied().unwrap_or(0);
        let per_bucket = (samples / (2 * blocks.len().max(1) as u64)).max(1);
        // The largest power of two not above `per_bucket`.
        let shift = u64::BITS - 1 - per_bucket.leading_zeros();
        let buckets = (samples >> shift) + 1;
        let mut first_block = Vec::with_capacity(buckets as usize);
        let mut block = 0;
        for bucket in 0..buckets {
            let start = bucket << shift;
            while block < ends.len() && ends[block] <= start {
                block += 1;
            }
            first_block.push(block as u32);
        }
        Self {
            ends,
            shift,
            first_block,
        }
    }

    /// The block holding `sample`, or `None` past the end: the same answer as a binary search
    /// over all blocks (empty blocks are never returned).
    #[inline]
    pub fn find(&self, sample: SampleId) -> Option<BlockIndex> {
        let bucket = usize::try_from(sample >> self.shift).ok()?;
        let low = *self.first_block.get(bucket)? as usize;
        let low_end = *self.ends.get(low)?;
        // The bucket's first block starts at or before the bucket (it is the first to reach
        // into it), and buckets are at most half a block wide on average: the sample sits in
        // that block or, past its end, nearly always in the next. Choosing between the two
        // without a branch (which a shuffled plan would mispredict half the time) leaves one
        // check that almost never fails: no search.
        let candidate = low + usize::from(sample >= low_end);
        if self.ends.get(candidate).is_some_and(|&end| end > sample) {
            return Some(candidate as BlockIndex);
        }
        // The holder is at most the first block reaching into the next bucket.
        let high = self
            .first_block
            .get(bucket + 1)
            .map_or(self.ends.len(), |&next| {
                (next as usize + 1).min(self.ends.len())
            });
        let index = low + self.ends[low..high].partition_point(|&end| end <= sample);
        (index < self.ends.len()).then_some(index as BlockIndex)
    }

    /// The block holding `sample` and the sample's row in it, or `None` past the end.
    ///
    /// It remembers nothing between calls, so lookups in a loop do not wait on each other: for
    /// shuffled samples the CPU overlaps their memory reads.
    #[inline]
    pub fn place(&self, sample: SampleId) -> Option<(BlockIndex, u64)> {
        let block = self.find(sample)?;
        Some((block, sample - self.range(block as usize).start))
    }

    /// The sample ids of block `index` (blocks tile the ids from 0).
    #[inline]
    fn range(&self, index: usize) -> std::ops::Range<SampleId> {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        start..self.ends[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::block_of;

    fn blocks(rows: &[u64]) -> Vec<Block> {
        let mut first_sample = 0;
        rows.iter()
            .enumerate()
            .map(|(index, &rows)| {
                let block = Block {
                    file: 0,
                    index_in_file: index as u32,
                    first_sample,
                    rows,
                };
                first_sample += rows;
                block
            })
            .collect()
    }

    #[test]
    fn agrees_with_binary_search_everywhere() {
        let cases: [&[u64]; 6] = [
            &[],
            &[0, 0],
            &[5],
            &[3, 0, 0, 7, 1, 1, 1, 0, 20, 2],
            &[1, 1000, 1, 1, 1, 0, 1, 1],
            &[64; 40],
        ];
        for rows in cases {
            let blocks = blocks(rows);
            let finder = BlockFinder::new(&blocks);
            let samples: u64 = rows.iter().sum();
            for sample in 0..samples + 3 {
                assert_eq!(
                    finder.find(sample),
                    block_of(&blocks, sample),
                    "{rows:?} {sample}"
                );
            }
            assert_eq!(finder.find(u64::MAX), None);
        }
    }

    #[test]
    fn the_finder_places_samples_in_any_order() {
        let rows = [3, 0, 0, 7, 1, 1, 1, 0, 20, 2];
        let blocks = blocks(&rows);
        let finder = BlockFinder::new(&blocks);
        let samples: u64 = rows.iter().sum();
        // Forward, backward and scattered: each lookup stands alone.
        let order = (0..samples + 2)
            .chain((0..samples).rev())
            .chain((0..samples).map(|i| i * 7 % samples));
        for sample in order {
            let expected = block_of(&blocks, sample)
                .map(|block| (block, sample - blocks[block as usize].first_sample));
            assert_eq!(finder.place(sample), expected, "{sample}");
        }
    }
}
