//! `Cached`: a block source wrapper that serves transformed samples from the cache.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use kiln_ml_core::{
    Block, BlockIndex, BlockLayout, BlockSource, BoxError, Fingerprint, ReadError, Transform,
};

use crate::codec::{BincodeCodec, Codec, CodecError};
use crate::disk::DiskCache;
use crate::ram::RamCache;
use crate::segment::{Segment, SegmentBuilder, SegmentBytes, SegmentKey};
use crate::stats::CacheStats;

use crate::{Error, Result};

/// An inner block source with a [`Transform`] applied to every sample, cached per block.
///
/// A read looks in the RAM tier (when enabled), then on disk; a miss reads the inner block,
/// transforms every sample, encodes them with the codec ([`BincodeCodec`] by default) and writes
/// the segment atomically. The key of a block's segment is the inner layout's fingerprint, the
/// block, the transform's and the codec's fingerprints and the format version, so a changed
/// file, projection, decoder or transform never serves stale data. [`BincodeCodec`]'s
/// fingerprint holds the sample type's serde layout, so a type whose fields change misses too;
/// a type serde cannot trace and [`PodCodec`](crate::PodCodec)'s element types count by name
/// alone: when you change one of those, bump the transform's version. A segment that fails verification is reported, removed and
/// rebuilt, never served. A segment that cannot be written while serving a read (a full disk, a
/// directory that went away) does not stop the read: its samples are served without being
/// written to disk (the RAM tier, if any, keeps them), and the failure is counted ([`CacheStats::failed_writes`](crate::CacheStats::failed_writes)) with
/// its error kept ([`DiskCache::last_write_error`]). [`warm`](Self::warm) does fail on it.
///
/// A failing inner read comes back as [`ReadError::Source`] (in [`Error::Read`]) and a rejected
/// sample as
/// [`Error::Transform`], both naming the block through
/// [`describe_block`](BlockLayout::describe_block) (for a Parquet source, its file and row group).
///
/// `Cached` is itself a [`BlockLayout`] and a [`BlockSource`], so it stacks under a loader or
/// another wrapper.
///
/// ```
/// use kiln_ml_core::{transform_fn, BlockSource};
/// use kiln_ml_cache::{Cached, DiskCache};
/// use kiln_ml_testkit::MemorySource;
///
/// let dir = tempfile::tempdir().unwrap();
/// let source = MemorySource::with_ids(&[&[3, 2]]);
/// let squares = transform_fn("square", 1, |id: u64| Ok::<_, std::convert::Infallible>(id * id));
/// let cached = Cached::new(source, squares, DiskCache::open(dir.path()).unwrap());
///
/// assert_eq!(cached.read_block(1).unwrap(), vec![9, 16]); // computed and written
/// assert_eq!(cached.read_block(1).unwrap(), vec![9, 16]); // served from disk
/// let stats = cached.stats();
/// assert_eq!((stats.misses, stats.disk_hits), (1, 1));
/// ```
#[derive(Debug)]
pub struct Cached<S, T, C = BincodeCodec> {
    inner: S,
    transform: T,
    codec: C,
    disk: Arc<DiskCache>,
    ram: Option<RamCache>,
    /// Computed at the first key, then shared by every block's: the codec's fingerprint traces
    /// the sample type's serde layout, too much to repeat per block read.
    identity: OnceLock<Identity>,
    /// The digests of every block's segment key, which a write under a size limit spares:
    /// computed at the first such write.
    own_segments: OnceLock<HashSet<Fingerprint>>,
    /// The disk's removal count when a write was last declined (`u64::MAX`: none was): until
    /// a segment is removed, this source's segments still fill the limit, and misses skip the
    /// write (and, without a RAM tier, the encoding) rather than be declined again.
    declined_at: AtomicU64,
}

/// The fingerprints every segment key of one [`Cached`] shares. Each part is fixed for the
/// wrapper's life: the inner layout, the transform and the codec cannot be swapped in place.
#[derive(Debug, Clone, Copy)]
struct Identity {
    layout: Fingerprint,
    transform: Fingerprint,
    codec: Fingerprint,
}

impl<S, T> Cached<S, T, BincodeCodec> {
    /// Caches `transform`'s outputs over `inner` in `disk` (a [`DiskCache`] or a shared
    /// `Arc<DiskCache>`), with the default codec and no RAM tier.
    pub fn new(inner: S, transform: T, disk: impl Into<Arc<DiskCache>>) -> Self {
        Self {
            inner,
            transform,
            codec: BincodeCodec,
            disk: disk.into(),
            ram: None,
            identity: OnceLock::new(),
            own_segments: OnceLock::new(),
            declined_at: AtomicU64::new(u64::MAX),
        }
    }
}

impl<S, T, C> Cached<S, T, C> {
    /// The same cache with another codec (for example [`PodCodec`](crate::PodCodec)).
    pub fn with_codec<D>(self, codec: D) -> Cached<S, T, D> {
        Cached {
            inner: self.inner,
            transform: self.transform,
            codec,
            disk: self.disk,
            ram: self.ram,
            // The codec changed: its fingerprint is not the old one's, nor are the keys.
            identity: OnceLock::new(),
            own_segments: OnceLock::new(),
            declined_at: AtomicU64::new(u64::MAX),
        }
    }

    /// Adds a RAM tier of at most `budget_bytes` over the disk segments.
    pub fn with_ram_budget(mut self, budget_bytes: u64) -> Self {
        self.ram = Some(RamCache::new(budget_bytes));
        self
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The transform.
    pub fn transform(&self) -> &T {
        &self.transform
    }

    /// The disk tier.
    pub fn disk(&self) -> &DiskCache {
        &self.disk
    }

    /// Counters of both tiers since they were opened.
    pub fn stats(&self) -> CacheStats {
        let mut stats = self.disk.stats();
        if let Some(ram) = &self.ram {
            stats.ram_hits = ram.hits();
            stats.ram_bytes = ram.bytes();
        }
        stats
    }
}

impl<S, T, C> Cached<S, T, C>
where
    S: BlockSource + BlockLayout,
    T: Transform<S::Item>,
    C: Codec<T::Output>,
{
    /// Writes a block's segment, sparing this cache's other segments under a size limit (see
    /// `DiskCache::put_sparing`): whether it was written.
    pub(crate) fn put_segment(&self, key: &SegmentKey, bytes: &[u8]) -> Result<bool> {
        if self.disk.limit_bytes().is_none() {
            return self.disk.put(key, bytes);
        }
        let own = self.own_segments.get_or_init(|| {
            (0..self.num_blocks() as BlockIndex)
                .map(|block| self.key(block).digest())
                .collect()
        });
        // Read before the write: a removal from now on makes the next miss try again.
        let removals = self.disk.removals();
        let written = self
            .disk
            .put_sparing(key, bytes, &|digest| own.contains(digest))?;
        if !written {
            self.declined_at.store(removals, Ordering::Relaxed);
        }
        Ok(written)
    }

    /// Whether this source's segments filled the size limit at its last declined write, and
    /// no segment was removed since: a write would be declined again.
    fn is_full(&self) -> bool {
        let declined_at = self.declined_at.load(Ordering::Relaxed);
        declined_at != u64::MAX && declined_at == self.disk.removals()
    }

    /// The cache key of a block's segment.
    pub fn key(&self, block: BlockIndex) -> SegmentKey {
        let identity = self.identity();
        SegmentKey {
            layout: identity.layout,
            block,
            transform: identity.transform,
            codec: identity.codec,
        }
    }

    fn identity(&self) -> Identity {
        *self.identity.get_or_init(|| Identity {
            layout: self.inner.fingerprint(),
            transform: self.transform.fingerprint(),
            codec: self.codec.fingerprint(),
        })
    }

    fn block(&self, block: BlockIndex) -> Result<Block> {
        self.inner
            .blocks()
            .get(block as usize)
            .copied()
            .ok_or(Error::Read(ReadError::NoSuchBlock {
                block,
                blocks: self.inner.num_blocks(),
            }))
    }

    /// Reads the inner block and transforms every sample, bypassing the cache.
    ///
    /// A source that returns another number of items than the block has rows is an error
    /// (caching them would serve the wrong samples under valid checksums from then on).
    pub fn compute_block(&self, block: BlockIndex) -> Result<Vec<T::Output>> {
        let Block { file, rows, .. } = self.block(block)?;
        let items = self.inner.read_block(block).map_err(|error| {
            Error::from_source(self.inner.describe_block(block), block, file, error)
        })?;
        if items.len() as u64 != rows {
            return Err(Error::Read(ReadError::Source {
                location: self.inner.describe_block(block),
                block,
                file,
                source: BoxError::from(format!(
                    "the source returned {} items for a block of {rows} rows",
                    items.len()
                )),
            }));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(row, item)| {
                self.transform
                    .apply(item)
                    .map_err(|error| Error::Transform {
                        location: self.inner.describe_block(block),
                        block,
                        file,
                        row: row as u64,
                        source: Box::new(error),
                    })
            })
            .collect()
    }

    /// The encoded segment of a block's samples.
    pub fn encode_block(&self, block: BlockIndex, samples: &[T::Output]) -> Result<Vec<u8>> {
        let mut builder = SegmentBuilder::new(self.key(block), samples.len());
        for (row, sample) in samples.iter().enumerate() {
            builder
                .push(|out| {
                    let start = out.len();
                    self.codec.encode(sample, out)?;
                    // Every record is decoded back (cheap beside the transform): a codec that
                    // cannot read what it wrote, for some samples only, fails here, by name and
                    // row, instead of every later read discarding the segment as corrupt and
                    // building it again (a cache that silently never hits).
                    round_trips(&self.codec, out, start)
                })
                .map_err(|error: CodecError| Error::Encode {
                    location: self.inner.describe_block(block),
                    block,
                    row: row as u64,
                    reason: error.to_string(),
                })?;
        }
        builder.finish().ok_or_else(|| Error::Encode {
            location: self.inner.describe_block(block),
            block,
            row: samples.len() as u64,
            reason: "the segment did not receive every sample".to_owned(),
        })
    }

    /// Decodes every record; a reason on failure (a wrong count or undecodable bytes mean the
    /// segment does not belong to this codec and sample type).
    fn decode(&self, segment: &Segment, rows: u64) -> Result<Vec<T::Output>, String> {
        if segment.len() as u64 != rows {
            return Err(format!(
                "it holds {} records but the block has {rows} rows",
                segment.len()
            ));
        }
        (0..segment.len())
            .map(|record| {
                self.codec
                    .decode(segment.record(record))
                    .map_err(|error| format!("record {record} does not decode: {error}"))
            })
            .collect()
    }

    /// The rows of a block of the inner layout.
    pub(crate) fn block_rows(&self, block: BlockIndex) -> Result<u64> {
        Ok(self.block(block)?.rows)
    }

    /// The size of the valid segment of `key` on disk that decodes into `rows` samples, if
    /// there is one; one that verifies but does not decode is discarded as corrupt (and `None`
    /// returned).
    pub(crate) fn decodes_from_disk(&self, key: &SegmentKey, rows: u64) -> Result<Option<u64>> {
        let (segment, opened) = match self.disk.get_opened(key) {
            Ok(Some(read)) => read,
            Ok(None) | Err(Error::CorruptSegment { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        match self.decode(&segment, rows) {
            Ok(_) => Ok(Some(opened.len())),
            Err(reason) => {
                self.disk.discard_undecodable(key, &opened, reason);
                Ok(None)
            }
        }
    }

    /// The block's samples from the disk tier, when a valid segment is there.
    fn read_from_disk(&self, key: &SegmentKey, rows: u64) -> Result<Option<Vec<T::Output>>> {
        let (segment, opened) = match self.disk.get_opened(key) {
            Ok(Some(read)) => read,
            Ok(None) | Err(Error::CorruptSegment { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        match self.decode(&segment, rows) {
            Ok(samples) => {
                if let Some(ram) = &self.ram {
                    ram.insert_from_disk(key.digest(), segment);
                }
                Ok(Some(samples))
            }
            Err(reason) => {
                // Verified bytes that do not decode: corruption, not a hit.
                self.disk.discard_undecodable(key, &opened, reason);
                Ok(None)
            }
        }
    }
}

/// Checks that `codec` decodes the record it appended to `out` from `start`.
fn round_trips<T, C: Codec<T>>(codec: &C, out: &[u8], start: usize) -> Result<(), CodecError> {
    let record = out.get(start..).ok_or_else(|| {
        CodecError::new("the codec shortened the buffer it was to append to (`encode` must append)")
    })?;
    codec.decode(record).map(drop).map_err(|error| {
        CodecError::new(format!(
            "the codec cannot decode what it encoded ({error}): `decode` must read back exactly \
             the bytes `encode` appended"
        ))
    })
}

impl<S, T, C> BlockLayout for Cached<S, T, C>
where
    S: BlockSource + BlockLayout,
    T: Transform<S::Item>,
    C: Codec<T::Output>,
{
    fn blocks(&self) -> &[Block] {
        self.inner.blocks()
    }

    /// The inner fingerprint combined with the transform's and the codec's: the identity of the
    /// transformed samples.
    fn fingerprint(&self) -> Fingerprint {
        let identity = self.identity();
        Fingerprint::builder()
            // Named before kiln-ml-cache existed; kept so existing fingerprints stay valid.
            .str("kiln-data cached")
            .fingerprint(identity.layout)
            .fingerprint(identity.transform)
            .fingerprint(identity.codec)
            .finish()
    }

    fn num_files(&self) -> usize {
        self.inner.num_files()
    }

    fn describe_block(&self, block: BlockIndex) -> String {
        self.inner.describe_block(block)
    }

    /// The inner source's estimate: a transform that grows or shrinks samples makes it off by
    /// the same factor.
    fn block_bytes(&self, block: BlockIndex) -> Option<u64> {
        self.inner.block_bytes(block)
    }
}

impl<S, T, C> BlockSource for Cached<S, T, C>
where
    S: BlockSource + BlockLayout,
    T: Transform<S::Item>,
    C: Codec<T::Output>,
{
    type Item = T::Output;
    type Error = Error;

    fn read_block(&self, block: BlockIndex) -> Result<Vec<T::Output>> {
        let rows = self.block(block)?.rows;
        let key = self.key(block);
        if let Some(ram) = &self.ram
            && let Some(segment) = ram.get(&key.digest())
        {
            match self.decode(&segment, rows) {
                Ok(samples) => {
                    ram.count_hit();
                    // A hint passed on before the segment was cached is not read now.
                    self.inner.cancel_prefetch(block);
                    return Ok(samples);
                }
                // Not a hit, and not to be tried again: the disk tier judges its own copy.
                Err(_) => ram.remove(&key.digest()),
            }
        }
        if let Some(samples) = self.read_from_disk(&key, rows)? {
            self.inner.cancel_prefetch(block);
            return Ok(samples);
        }
        let samples = self.compute_block(block)?;
        let full = self.is_full();
        if full && self.ram.is_none() {
            self.disk.count_declined();
            return Ok(samples);
        }
        let bytes = self.encode_block(block, &samples)?;
        if full {
            self.disk.count_declined();
        } else if let Err(error) = self.put_segment(&key, &bytes) {
            // The samples are good; only keeping them failed (a full disk, a directory that
            // went away). Training goes on uncached rather than stopping; `warm` does fail.
            self.disk.record_failed_write(&error);
        }
        if let Some(ram) = &self.ram
            && let Ok(segment) = Segment::verify(SegmentBytes::owned(bytes), &key)
        {
            ram.insert(key.digest(), segment);
        }
        Ok(samples)
    }

    /// Passes the hint on for a block the disk cache does not hold: only a miss reads the
    /// inner source.
    fn prefetch(&self, block: BlockIndex) {
        if !self.disk.contains(&self.key(block)) {
            self.inner.prefetch(block);
        }
    }

    /// Passes the withdrawal on (the segment may have been written since the hint).
    fn cancel_prefetch(&self, block: BlockIndex) {
        self.inner.cancel_prefetch(block);
    }
}
