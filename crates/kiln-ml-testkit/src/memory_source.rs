//! An in-memory dataset: layout and block source in one value.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kiln_ml_core::{Block, BlockIndex, BlockLayout, BlockSource, Fingerprint, Layout, SampleId};

/// Why a [`MemorySource`] read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemorySourceError {
    /// The block index is past the end of the layout.
    #[error("block {block} does not exist: the layout has {blocks} blocks")]
    NoSuchBlock {
        /// The block asked for.
        block: BlockIndex,
        /// How many blocks there are.
        blocks: usize,
    },
    /// A failure injected with [`MemorySource::fail_block`].
    #[error("injected failure reading block {block} of file {file}")]
    Injected {
        /// The failing block.
        block: BlockIndex,
        /// Its file.
        file: u32,
    },
}

/// Files of blocks of items, held in memory, with read counting and failure injection.
#[derive(Debug)]
pub struct MemorySource<T> {
    layout: Layout,
    items: Vec<Vec<T>>,
    failing: Mutex<BTreeSet<BlockIndex>>,
    reads: AtomicU64,
}

impl<T: Clone + Send + Sync> MemorySource<T> {
    /// Builds a source from files, each a list of blocks, each a list of items.
    pub fn new(files: Vec<Vec<Vec<T>>>) -> Self {
        let mut builder = Layout::builder();
        let mut items = Vec::new();
        for (index, file) in files.into_iter().enumerate() {
            let rows: Vec<u64> = file.iter().map(|block| block.len() as u64).collect();
            builder.add_file(
                Fingerprint::builder()
                    .str("memory")
                    .u64(index as u64)
                    .finish(),
                &rows,
            );
            items.extend(file);
        }
        let layout = builder
            .build()
            .expect("blocks built from vectors always tile the sample ids");
        Self {
            layout,
            items,
            failing: Mutex::new(BTreeSet::new()),
            reads: AtomicU64::new(0),
        }
    }

    /// Makes every read of `block` fail until [`heal_block`](Self::heal_block).
    pub fn fail_block(&self, block: BlockIndex) {
        self.failing.lock().unwrap().insert(block);
    }

    /// Lets `block` be read again.
    pub fn heal_block(&self, block: BlockIndex) {
        self.failing.lock().unwrap().remove(&block);
    }

    /// Number of successful and failed reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The owned layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

impl MemorySource<SampleId> {
    /// A source whose items are their own sample ids, from each file's block row counts: the
    /// natural fixture for exactly-once checks.
    pub fn with_ids(files: &[&[u64]]) -> Self {
        let mut next: SampleId = 0;
        let files = files
            .iter()
            .map(|blocks| {
                blocks
                    .iter()
                    .map(|&rows| {
                        let block: Vec<SampleId> = (next..next + rows).collect();
                        next += rows;
                        block
                    })
                    .collect()
            })
            .collect();
        Self::new(files)
    }
}

impl<T> BlockLayout for MemorySource<T> {
    fn blocks(&self) -> &[Block] {
        self.layout.blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.layout.fingerprint()
    }
    fn num_files(&self) -> usize {
        self.layout.num_files()
    }
}

impl<T: Clone + Send + Sync> BlockSource for MemorySource<T> {
    type Item = T;
    type Error = MemorySourceError;

    fn read_block(&self, block: BlockIndex) -> Result<Vec<T>, MemorySourceError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let items = self
            .items
            .get(block as usize)
            .ok_or(MemorySourceError::NoSuchBlock {
                block,
                blocks: self.items.len(),
            })?;
        if self.failing.lock().unwrap().contains(&block) {
            let file = self.layout.blocks()[block as usize].file;
            return Err(MemorySourceError::Injected { block, file });
        }
        Ok(items.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_the_layout() {
        let source = MemorySource::with_ids(&[&[2, 0], &[3]]);
        for (index, block) in source.blocks().iter().enumerate() {
            let items = source.read_block(index as BlockIndex).unwrap();
            assert_eq!(items, block.samples().collect::<Vec<_>>());
        }
        assert_eq!(source.reads(), 3);
    }

    #[test]
    fn injected_failures_name_the_block_and_heal() {
        let source = MemorySource::with_ids(&[&[2], &[3]]);
        source.fail_block(1);
        let error = source.read_block(1).unwrap_err();
        assert_eq!(
            error.to_string(),
            "injected failure reading block 1 of file 1"
        );
        source.heal_block(1);
        assert!(source.read_block(1).is_ok());
        assert!(matches!(
            source.read_block(9),
            Err(MemorySourceError::NoSuchBlock {
                block: 9,
                blocks: 2
            })
        ));
    }
}
