//! Building a whole cache ahead of training, in parallel, with a progress bar.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use kiln_ml_core::{BlockIndex, BlockLayout, BlockSource, Transform};
use rayon::prelude::*;

use crate::cached::Cached;
use crate::codec::Codec;
use crate::{Error, Result};

/// What [`Cached::warm`] did.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WarmReport {
    /// Blocks in the layout.
    pub blocks: u64,
    /// Blocks computed and written.
    pub built: u64,
    /// Blocks whose segment was already there and verified.
    pub already_cached: u64,
    /// Missing blocks not written because this call's segments reached the disk cache's size
    /// limit ([`DiskCache::with_limit_bytes`](crate::DiskCache::with_limit_bytes)): not built,
    /// or built and not written. The warm-up stops filling the cache rather than evict what it
    /// found or built; these blocks are computed when first read, as without a cache.
    #[serde(default)]
    pub left_out: u64,
    /// Segment bytes this call wrote (not those written meanwhile by other users of the same
    /// [`DiskCache`](crate::DiskCache)).
    pub bytes_written: u64,
    /// Wall time.
    pub seconds: f64,
}

/// A progress bar on standard error (indicatif hides it when that is not a terminal).
pub(crate) fn progress_bar(len: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len).with_message(message);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} blocks ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

impl<S, T, C> Cached<S, T, C>
where
    S: BlockSource + BlockLayout,
    T: Transform<S::Item>,
    C: Codec<T::Output>,
{
    /// Builds every missing or corrupt segment in parallel on rayon's pool, with a progress bar
    /// on standard error when it is a terminal.
    ///
    /// Runs in two passes: the first verifies and decodes every existing segment (read once),
    /// so a warm cache is also a checked one: a segment whose bytes verify but do not decode,
    /// or hold the wrong number of records, is counted as corrupt and rebuilt like a damaged
    /// one. The second builds the missing ones.
    ///
    /// Under a size limit, this call's segments (those it found and those it built) are kept
    /// within it: once a built segment would not fit beside them, it is not written and the
    /// missing blocks not started yet are left out ([`WarmReport::left_out`]) rather than built
    /// and then evicted; which blocks those are depends on the threads' order. Other segments
    /// in the directory (other datasets, an older transform's) are evicted, least recently used
    /// first, to make room, as any write does: the segments this call found were used last.
    ///
    /// Runs on the current rayon pool: wrap the call in `ThreadPool::install` to choose the
    /// threads. Stops at the first failure; a panicking transform is reported as a
    /// `kiln_ml_core::ReadError::Panicked` ([`Error::Read`]).
    pub fn warm(&self) -> Result<WarmReport> {
        self.warm_with(progress_bar(self.num_blocks() as u64, "warming cache"))
    }

    /// [`warm`](Self::warm) reporting progress to a bar of your own.
    pub fn warm_with(&self, bar: ProgressBar) -> Result<WarmReport> {
        let result = self.warm_passes(&bar);
        bar.finish_and_clear();
        result
    }

    fn warm_passes(&self, bar: &ProgressBar) -> Result<WarmReport> {
        let started = Instant::now();
        let blocks = self.num_blocks() as BlockIndex;
        let room = Room {
            limit: self.disk().limit_bytes(),
            taken: AtomicU64::new(0),
            full: AtomicBool::new(false),
        };
        // Every segment found is counted before any is built, so a built one never evicts
        // one this call found (a found one is not yet counted, and least recently used).
        let missing: Vec<BlockIndex> = (0..blocks)
            .into_par_iter()
            .map(|block| {
                let found = self.decodes_from_disk(&self.key(block), self.block_rows(block)?)?;
                if let Some(bytes) = found {
                    room.taken.fetch_add(bytes, Ordering::Relaxed);
                    bar.inc(1);
                }
                Ok::<_, Error>(found.is_none().then_some(block))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        let built = AtomicU64::new(0);
        let left_out = AtomicU64::new(0);
        let bytes_written = AtomicU64::new(0);
        missing.par_iter().try_for_each(|&block| {
            match self.build_block(block, &room)? {
                Some(bytes) => {
                    built.fetch_add(1, Ordering::Relaxed);
                    bytes_written.fetch_add(bytes, Ordering::Relaxed);
                }
                None => {
                    left_out.fetch_add(1, Ordering::Relaxed);
                }
            }
            bar.inc(1);
            Ok::<_, Error>(())
        })?;
        let (built, left_out) = (built.into_inner(), left_out.into_inner());
        Ok(WarmReport {
            blocks: u64::from(blocks),
            built,
            already_cached: u64::from(blocks) - missing.len() as u64,
            left_out,
            bytes_written: bytes_written.into_inner(),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Builds and writes one missing block's segment: its bytes, or `None` when this call's
    /// segments reached the size limit (it was then not built, or built and not written).
    fn build_block(&self, block: BlockIndex, room: &Room) -> Result<Option<u64>> {
        if room.full.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let bytes = catch_unwind(AssertUnwindSafe(|| {
            let samples = self.compute_block(block)?;
            self.encode_block(block, &samples)
        }))
        .map_err(|payload| {
            Error::panicked(format!("warming {}", self.describe_block(block)), payload)
        })??;
        if !room.take(bytes.len() as u64) {
            room.full.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        // Room counted this call's segments; other segments of this source that a concurrent
        // reader wrote can still decline it.
        if !self.put_segment(&self.key(block), &bytes)? {
            room.full.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        Ok(Some(bytes.len() as u64))
    }
}

/// What one warm-up's segments may take of the disk cache's size limit.
struct Room {
    limit: Option<u64>,
    /// Bytes of the segments this call found or built so far.
    taken: AtomicU64,
    /// A built segment did not fit: the missing blocks not started yet are left out.
    full: AtomicBool,
}

impl Room {
    /// Takes `bytes` for a segment about to be written; `false` (taking nothing) when they do
    /// not fit beside what this call took already. Threads take in turn (compare and swap), so
    /// two cannot both fit into the last free bytes, and no lock is held while writing.
    fn take(&self, bytes: u64) -> bool {
        let Some(limit) = self.limit else {
            self.taken.fetch_add(bytes, Ordering::Relaxed);
            return true;
        };
        self.taken
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
                taken.checked_add(bytes).filter(|&total| total <= limit)
            })
            .is_ok()
    }
}
