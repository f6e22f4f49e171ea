//! The `BlockSource` seam: read one block's samples at once, with sequential reads.

use std::sync::Arc;

use crate::BlockIndex;

/// Reads whole blocks of samples.
///
/// Implementations read a block as a whole, with sequential reads (a Parquet row group's column
/// chunks, a cache segment), and return its samples in row order. They are shared between loader worker
/// threads, hence `Send + Sync`. Wrappers such as a cache implement the same trait around an
/// inner source.
///
/// ```
/// use kiln_ml_core::{BlockIndex, BlockSource};
///
/// /// Block `b` holds the numbers `10 b .. 10 b + 10`.
/// struct Tens;
///
/// impl BlockSource for Tens {
///     type Item = u64;
///     type Error = std::convert::Infallible;
///     fn read_block(&self, block: BlockIndex) -> Result<Vec<u64>, Self::Error> {
///         let start = u64::from(block) * 10;
///         Ok((start..start + 10).collect())
///     }
/// }
///
/// assert_eq!(Tens.read_block(2).unwrap()[0], 20);
/// ```
pub trait BlockSource: Send + Sync {
    /// One sample as the source produces it.
    type Item: Send;
    /// What a failed read reports; it should name the file and block.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reads every sample of one block, in row order.
    fn read_block(&self, block: BlockIndex) -> Result<Vec<Self::Item>, Self::Error>;

    /// A hint that `block` will be read soon: a source whose reads wait on a network (an
    /// object store) starts fetching it now, so that many blocks are in flight while few
    /// threads decode. Loaders call it when they schedule a read; it must return at once and
    /// never fail (a failed fetch is reported by the read). The default does nothing.
    fn prefetch(&self, block: BlockIndex) {
        let _ = block;
    }

    /// Withdraws a [`prefetch`](Self::prefetch) hint: `block` will not be read after all (the
    /// epoch that scheduled it was dropped first). A source drops what it fetched ahead for it,
    /// so abandoned epochs hold no memory. It must return at once and never fail. The default
    /// does nothing.
    fn cancel_prefetch(&self, block: BlockIndex) {
        let _ = block;
    }
}

impl<T: BlockSource + ?Sized> BlockSource for &T {
    type Item = T::Item;
    type Error = T::Error;
    fn read_block(&self, block: BlockIndex) -> Result<Vec<Self::Item>, Self::Error> {
        (**self).read_block(block)
    }
    fn prefetch(&self, block: BlockIndex) {
        (**self).prefetch(block);
    }
    fn cancel_prefetch(&self, block: BlockIndex) {
        (**self).cancel_prefetch(block);
    }
}

impl<T: BlockSource + ?Sized> BlockSource for Box<T> {
    type Item = T::Item;
    type Error = T::Error;
    fn read_block(&self, block: BlockIndex) -> Result<Vec<Self::Item>, Self::Error> {
        (**self).read_block(block)
    }
    fn prefetch(&self, block: BlockIndex) {
        (**self).prefetch(block);
    }
    fn cancel_prefetch(&self, block: BlockIndex) {
        (**self).cancel_prefetch(block);
    }
}

impl<T: BlockSource + ?Sized> BlockSource for Arc<T> {
    type Item = T::Item;
    type Error = T::Error;
    fn read_block(&self, block: BlockIndex) -> Result<Vec<Self::Item>, Self::Error> {
        (**self).read_block(block)
    }
    fn prefetch(&self, block: BlockIndex) {
        (**self).prefetch(block);
    }
    fn cancel_prefetch(&self, block: BlockIndex) {
        (**self).cancel_prefetch(block);
    }
}
