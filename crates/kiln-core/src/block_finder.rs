//! Constant-time lookup of the block holding a sample, for building plan schedules fast.

use crate::{Block, BlockIndex, SampleId};

/// Maps sample ids to blocks with a table of buckets: bucket `i` covers sample ids
/// `[i << shift, (i + 1) << shift)` and records the first block that reaches into it, so a
/// lookup is one table read and a binary search over the few blocks of one bucket.
///
/// A plain binary search over all blocks costs a cache miss and a mispredicted branch per level
/// (17 levels for 100K blocks), which dominated plan building when consecutive plan positions
/// come from different blocks, as they do in a shuffle.
pub(crate) struct BlockFinder<'a> {
    blocks: &'a [Block],
    shift: u32,
    /// `first_block[i]`: index of the first block whose end is past the bucket's first id.
    first_block: Vec<u32>,
}

impl<'a> BlockFinder<'a> {
    /// A finder for a tiling block list, with about two to four buckets per block.
    pub(crate) fn new(blocks: &'a [Block]) -> Self {
        let samples = blocks.last().map_or(0, Block::end);
        let per_bucket = (samples / (2 * blocks.len().max(1) as u64)).max(1);
        // The largest power of two not above `per_bucket`.
        let shift = u64::BITS - 1 - per_bucket.leading_zeros();
        let buckets = (samples >> shift) + 1;
        let mut first_block = Vec::with_capacity(buckets as usize);
        let mut block = 0;
        for bucket in 0..buckets {
            let start = bucket << shift;
            while block < blocks.len() && blocks[block].end() <= start {
                block += 1;
            }
            first_block.push(block as u32);
        }
        Self {
            blocks,
            shift,
            first_block,
        }
    }

    /// The block holding `sample`, or `None` past the end: the same answer as a binary search
    /// over all blocks (empty blocks are never returned).
    pub(crate) fn find(&self, sample: SampleId) -> Option<BlockIndex> {
        let bucket = usize::try_from(sample >> self.shift).ok()?;
        let low = *self.first_block.get(bucket)? as usize;
        // The holder is at most the first block reaching into the next bucket.
        let high = self
            .first_block
            .get(bucket + 1)
            .map_or(self.blocks.len(), |&next| {
                (next as usize + 1).min(self.blocks.len())
            });
        let index = low + self.blocks[low..high].partition_point(|block| block.end() <= sample);
        (index < self.blocks.len()).then_some(index as BlockIndex)
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
}
