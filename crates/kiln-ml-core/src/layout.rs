//! Where samples live: blocks of contiguous sample ids inside files.

use std::ops::Range;

use crate::{Error, Fingerprint, Result};

/// Global id of one sample: its position in the layout's natural (file, block, row) order.
pub type SampleId = u64;

/// Index of a block in its layout's block list.
pub type BlockIndex = u32;

/// Index of a file in its layout's file list.
pub type FileId = u32;

/// One block: a contiguous run of samples that is read as a whole, with sequential reads (a
/// Parquet row group, a cache segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Block {
    /// The file the block belongs to.
    pub file: FileId,
    /// Position of the block inside its file (the row group index).
    pub index_in_file: u32,
    /// Global id of the block's first sample.
    pub first_sample: SampleId,
    /// Number of samples (rows) in the block; may be zero.
    pub rows: u64,
}

impl Block {
    /// The global ids of the block's samples.
    pub fn samples(&self) -> Range<SampleId> {
        self.first_sample..self.end()
    }

    /// One past the global id of the block's last sample.
    pub fn end(&self) -> SampleId {
        self.first_sample + self.rows
    }
}

/// The dataset as an ordered list of blocks, plus a fingerprint of its exact content.
///
/// Blocks tile the sample ids `0..num_samples()` in order: block `i + 1` starts where block `i`
/// ends. [`validate_layout`] checks this; [`Layout`] enforces it on construction. Only
/// [`blocks`](BlockLayout::blocks) and [`fingerprint`](BlockLayout::fingerprint) are required.
///
/// ```
/// use kiln_ml_core::{BlockLayout, Fingerprint, Layout};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a.parquet"), &[100, 50]);
/// builder.add_file(Fingerprint::of_bytes(b"b.parquet"), &[70]);
/// let layout = builder.build().unwrap();
/// assert_eq!(layout.num_samples(), 220);
/// assert_eq!(layout.num_files(), 2);
/// assert_eq!(layout.block_of(120), Some(1));
/// ```
pub trait BlockLayout {
    /// The blocks, in sample-id order.
    fn blocks(&self) -> &[Block];

    /// A fingerprint of the files, their identity (size, modification) and block sizes.
    fn fingerprint(&self) -> Fingerprint;

    /// Number of blocks.
    fn num_blocks(&self) -> usize {
        self.blocks().len()
    }

    /// Number of samples in the whole layout.
    fn num_samples(&self) -> u64 {
        self.blocks().last().map_or(0, Block::end)
    }

    /// Number of distinct files (one more than the largest file id).
    fn num_files(&self) -> usize {
        self.blocks()
            .iter()
            .map(|block| block.file as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// The block holding a sample, or `None` when the id is past the end.
    fn block_of(&self, sample: SampleId) -> Option<BlockIndex> {
        block_of(self.blocks(), sample)
    }

    /// Where a block lives, for error messages: `block B (file F)` by default; layouts that know
    /// their files name the path and row group instead.
    fn describe_block(&self, block: BlockIndex) -> String {
        match self.blocks().get(block as usize) {
            Some(found) => format!("block {block} (file {})", found.file),
            None => format!("block {block} (not in the layout)"),
        }
    }

    /// About how many bytes a block's samples take in memory once read, when the layout knows
    /// (a Parquet row group's uncompressed size): what lets a loader bound its memory in bytes
    /// rather than samples. `None` by default.
    fn block_bytes(&self, _block: BlockIndex) -> Option<u64> {
        None
    }
}

/// Binary search for the block holding `sample` in a tiling block list.
pub(crate) fn block_of(blocks: &[Block], sample: SampleId) -> Option<BlockIndex> {
    // The first block whose end is past the sample; empty blocks are skipped naturally because
    // their end equals the next block's start.
    let index = blocks.partition_point(|block| block.end() <= sample);
    (index < blocks.len()).then_some(index as BlockIndex)
}

/// Checks that a layout's blocks tile `0..num_samples()` in order and fit the index types.
pub fn validate_layout(layout: &(impl BlockLayout + ?Sized)) -> Result<()> {
    let blocks = layout.blocks();
    if blocks.len() > BlockIndex::MAX as usize {
        return Err(Error::InvalidLayout {
            block: BlockIndex::MAX as usize,
            reason: format!(
                "{} blocks exceed the limit of {}",
                blocks.len(),
                BlockIndex::MAX
            ),
        });
    }
    let mut expected_start = 0;
    for (index, block) in blocks.iter().enumerate() {
        if block.first_sample != expected_start {
            return Err(Error::InvalidLayout {
                block: index,
                reason: format!(
                    "starts at sample {} but the previous block ends at {}",
                    block.first_sample, expected_start
                ),
            });
        }
        expected_start =
            block
                .first_sample
                .checked_add(block.rows)
                .ok_or_else(|| Error::InvalidLayout {
                    block: index,
                    reason: "sample ids overflow u64".to_owned(),
                })?;
    }
    Ok(())
}

impl<T: BlockLayout + ?Sized> BlockLayout for &T {
    fn blocks(&self) -> &[Block] {
        (**self).blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
    fn num_samples(&self) -> u64 {
        (**self).num_samples()
    }
    fn num_files(&self) -> usize {
        (**self).num_files()
    }
    fn describe_block(&self, block: BlockIndex) -> String {
        (**self).describe_block(block)
    }
    fn block_bytes(&self, block: BlockIndex) -> Option<u64> {
        (**self).block_bytes(block)
    }
}

impl<T: BlockLayout + ?Sized> BlockLayout for Box<T> {
    fn blocks(&self) -> &[Block] {
        (**self).blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
    fn num_samples(&self) -> u64 {
        (**self).num_samples()
    }
    fn num_files(&self) -> usize {
        (**self).num_files()
    }
    fn describe_block(&self, block: BlockIndex) -> String {
        (**self).describe_block(block)
    }
    fn block_bytes(&self, block: BlockIndex) -> Option<u64> {
        (**self).block_bytes(block)
    }
}

impl<T: BlockLayout + ?Sized> BlockLayout for std::sync::Arc<T> {
    fn blocks(&self) -> &[Block] {
        (**self).blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
    fn num_samples(&self) -> u64 {
        (**self).num_samples()
    }
    fn num_files(&self) -> usize {
        (**self).num_files()
    }
    fn describe_block(&self, block: BlockIndex) -> String {
        (**self).describe_block(block)
    }
    fn block_bytes(&self, block: BlockIndex) -> Option<u64> {
        (**self).block_bytes(block)
    }
}

/// A validated, owned block layout: the plain value every [`BlockLayout`] can be turned into.
///
/// Deserializing checks what [`Layout::new`] checks, so a saved layout cannot have blocks that
/// fail to tile the sample ids, or fewer files than its blocks name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "UncheckedLayout")]
pub struct Layout {
    blocks: Vec<Block>,
    files: usize,
    fingerprint: Fingerprint,
}

/// A layout as written in a file, before [`Layout::new`]'s checks.
#[derive(serde::Deserialize)]
struct UncheckedLayout {
    blocks: Vec<Block>,
    files: usize,
    fingerprint: Fingerprint,
}

impl TryFrom<UncheckedLayout> for Layout {
    type Error = Error;

    fn try_from(unchecked: UncheckedLayout) -> Result<Self> {
        let mut layout = Layout::new(unchecked.blocks, unchecked.fingerprint)?;
        // More files than the blocks name is fine: files without blocks still count.
        if unchecked.files < layout.files {
            return Err(Error::InvalidLayout {
                block: layout.blocks.len().saturating_sub(1),
                reason: format!(
                    "the blocks name {} files but the layout counts {}",
                    layout.files, unchecked.files
                ),
            });
        }
        layout.files = unchecked.files;
        Ok(layout)
    }
}

impl Layout {
    /// Builds a layout from blocks that must tile `0..n` in order.
    pub fn new(blocks: Vec<Block>, fingerprint: Fingerprint) -> Result<Self> {
        let files = blocks
            .iter()
            .map(|block| block.file as usize + 1)
            .max()
            .unwrap_or(0);
        let layout = Self {
            blocks,
            files,
            fingerprint,
        };
        validate_layout(&layout)?;
        Ok(layout)
    }

    /// Copies any layout into an owned value, checking it (files without blocks at the end
    /// still count, as in the layout copied).
    pub fn from_layout(layout: &(impl BlockLayout + ?Sized)) -> Result<Self> {
        let mut copy = Self::new(layout.blocks().to_vec(), layout.fingerprint())?;
        copy.files = copy.files.max(layout.num_files());
        Ok(copy)
    }

    /// Starts a layout built file by file; the fingerprint is derived from what is added.
    pub fn builder() -> LayoutBuilder {
        LayoutBuilder::default()
    }
}

impl BlockLayout for Layout {
    fn blocks(&self) -> &[Block] {
        &self.blocks
    }
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn num_files(&self) -> usize {
        self.files
    }
}

/// Builds a [`Layout`] file by file, fingerprinting each file's identity and block sizes.
#[derive(Debug, Default, Clone)]
pub struct LayoutBuilder {
    blocks: Vec<Block>,
    files: u32,
    next_sample: SampleId,
    fingerprint: crate::FingerprintBuilder,
}

impl LayoutBuilder {
    /// Adds a file with the given identity (for example a fingerprint of its path, size and
    /// modification time) and the row counts of its blocks, and returns its id.
    pub fn add_file(&mut self, identity: Fingerprint, block_rows: &[u64]) -> FileId {
        let file = self.files;
        self.files += 1;
        let mut fingerprint = std::mem::take(&mut self.fingerprint)
            .fingerprint(identity)
            .u64(block_rows.len() as u64);
        for (index_in_file, &rows) in block_rows.iter().enumerate() {
            fingerprint = fingerprint.u64(rows);
            self.blocks.push(Block {
                file,
                index_in_file: index_in_file as u32,
                first_sample: self.next_sample,
                rows,
            });
            // Wrapping: ids past u64 are `build`'s error to report (its validation checks
            // every block's end), in debug builds as in release.
            self.next_sample = self.next_sample.wrapping_add(rows);
        }
        self.fingerprint = fingerprint;
        file
    }

    /// Finishes the layout.
    pub fn build(self) -> Result<Layout> {
        let fingerprint = self.fingerprint.u64(u64::from(self.files)).finish();
        let mut layout = Layout::new(self.blocks, fingerprint)?;
        // Files without blocks still count.
        layout.files = self.files as usize;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(files: &[&[u64]]) -> Layout {
        let mut builder = Layout::builder();
        for (index, rows) in files.iter().enumerate() {
            builder.add_file(Fingerprint::builder().u64(index as u64).finish(), rows);
        }
        builder.build().unwrap()
    }

    #[test]
    fn a_copy_keeps_files_without_blocks_at_the_end() {
        let original = layout(&[&[3], &[]]);
        assert_eq!(original.num_files(), 2);
        let copy = Layout::from_layout(&original).unwrap();
        assert_eq!(copy.num_files(), 2);
        assert_eq!(copy, original);
    }

    #[test]
    fn blocks_tile_the_sample_ids() {
        let layout = layout(&[&[3, 0, 2], &[], &[4]]);
        assert_eq!(layout.num_samples(), 9);
        assert_eq!(layout.num_blocks(), 4);
        assert_eq!(layout.num_files(), 3);
        assert_eq!(layout.blocks()[3].file, 2);
        assert_eq!(layout.blocks()[2].samples(), 3..5);
    }

    #[test]
    fn more_samples_than_u64_holds_are_an_error_not_a_panic() {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"huge"), &[u64::MAX, 1]);
        let error = builder.build().unwrap_err();
        assert!(
            matches!(error, Error::InvalidLayout { block: 1, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("overflow"), "{error}");
    }

    #[test]
    fn block_of_skips_empty_blocks() {
        let layout = layout(&[&[3, 0, 2], &[4]]);
        let owners: Vec<_> = (0..10).map(|id| layout.block_of(id)).collect();
        let expected = [0, 0, 0, 2, 2, 3, 3, 3, 3].map(Some);
        assert_eq!(&owners[..9], &expected);
        assert_eq!(owners[9], None);
    }

    #[test]
    fn fingerprint_changes_with_block_sizes_and_identity() {
        let base = layout(&[&[3, 2]]).fingerprint();
        assert_eq!(base, layout(&[&[3, 2]]).fingerprint());
        assert_ne!(base, layout(&[&[2, 3]]).fingerprint());
        assert_ne!(base, layout(&[&[3], &[2]]).fingerprint());
        let mut other = Layout::builder();
        other.add_file(Fingerprint::of_bytes(b"changed"), &[3, 2]);
        assert_ne!(base, other.build().unwrap().fingerprint());
    }

    #[test]
    fn blocks_describe_their_file() {
        let layout = layout(&[&[3], &[2]]);
        assert_eq!(layout.describe_block(1), "block 1 (file 1)");
        // Through the forwarding impl for references.
        fn describe(layout: impl BlockLayout, block: BlockIndex) -> String {
            layout.describe_block(block)
        }
        assert_eq!(describe(&layout, 0), "block 0 (file 0)");
        assert_eq!(layout.describe_block(7), "block 7 (not in the layout)");
    }

    #[test]
    fn deserialized_layouts_are_checked() {
        let saved = layout(&[&[3, 0, 2], &[], &[4]]);
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<Layout>(&json).unwrap(), saved);
        let gap = json.replace(
            r#""first_sample":3,"rows":0"#,
            r#""first_sample":4,"rows":0"#,
        );
        assert_ne!(gap, json);
        let error = serde_json::from_str::<Layout>(&gap)
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid layout at block 1"), "{error}");
        let too_few_files = json.replace(r#""files":3"#, r#""files":2"#);
        assert_ne!(too_few_files, json);
        let error = serde_json::from_str::<Layout>(&too_few_files)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("name 3 files but the layout counts 2"),
            "{error}"
        );
    }

    #[test]
    fn gaps_are_rejected_with_the_block_named() {
        let blocks = vec![
            Block {
                file: 0,
                index_in_file: 0,
                first_sample: 0,
                rows: 4,
            },
            Block {
                file: 0,
                index_in_file: 1,
                first_sample: 5,
                rows: 1,
            },
        ];
        let error = Layout::new(blocks, Fingerprint::of_bytes(b"")).unwrap_err();
        assert!(
            matches!(error, Error::InvalidLayout { block: 1, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("starts at sample 5"));
    }
}
