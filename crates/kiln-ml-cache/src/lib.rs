//! Fingerprinted preprocessing caches: expensive per-sample work (graph construction, feature
//! extraction) runs once, and later epochs and later runs read its outputs back from disk or
//! RAM, verified, at close to page-cache speed.
//!
//! kiln-ml-cache wraps any kiln-ml-core [`BlockSource`](kiln_ml_core::BlockSource) that is also a
//! [`BlockLayout`](kiln_ml_core::BlockLayout) (kiln-ml-data's `ParquetSource`, an in-memory source, a
//! source of your own) and is again both, so it stacks under kiln-ml-data's `Loader` or any code
//! that reads blocks. It depends on kiln-ml-core only: no Parquet, no Arrow, no Burn.
//!
//! | piece | what it does |
//! |---|---|
//! | [`Cached`] | applies a [`Transform`](kiln_ml_core::Transform) to every sample and caches the outputs per block; [`Cached::warm`] builds the whole cache in parallel with a progress bar; [`Cached::stats`] counts hits, misses and bytes |
//! | [`DiskCache`] | a directory of segments: atomic writes, every byte verified on read, large segments memory-mapped, an LRU size limit, corrupt segments reported and rebuilt |
//! | [`RamCache`] | verified segments kept in memory under a byte budget ([`Cached::with_ram_budget`]) |
//! | [`Codec`]: [`BincodeCodec`], [`PodCodec`] | how samples become record bytes and back |
//! | [`SegmentKey`], [`SegmentBuilder`], [`Segment`] | the segment format: one file per source block, keyed by the layout, block, transform, codec and [`FORMAT_VERSION`] |
//! | [`CacheStats`], [`CorruptSegment`], [`WarmReport`] | what the cache did |
//!
//! A segment's key covers the inner layout's fingerprint (for a Parquet source: files, sizes,
//! modification times, row groups, projection, decoder), the transform's fingerprint (name,
//! version, parameters) and the codec's (codec, sample type, byte order), so a change to any of
//! them misses rather than serving stale samples.
//!
//! # Sample encoding
//!
//! Cached samples are encoded by a [`Codec`], part of the cache key:
//!
//! - [`BincodeCodec`] (the default) takes any serde type. bincode 2 writes numbers as raw
//!   little-endian bytes with no field names, tags or text, so encoding and decoding are a
//!   bounds-checked copy; it is already in the dependency graph through Burn. Self-describing
//!   formats (JSON, MessagePack, CBOR) spend their time on names and tags that a cache, which
//!   always reads back the type it wrote, does not need; postcard's varints make every
//!   integer a loop with branches.
//! - [`PodCodec`] stores plain numeric arrays (`Vec<f32>`, `Vec<[f32; 3]>`, any `bytemuck::Pod`)
//!   as their raw memory. Records are 8-byte aligned in the segment, so
//!   [`Segment::pod_record`] views them in place (in the memory map, for large segments) with
//!   no copy at all, and decoding to a `Vec` is one `memcpy`.
//!
//! # Verified reads at page-cache speed
//!
//! Every byte of a segment is verified on each read from disk, so a corrupt segment is never
//! served. The payload is checked by one XXH3-64 over all of it (SIMD-bound, tens of GB/s)
//! rather than by a thousand short per-record hashes (call-bound, about half that speed); each
//! record still carries its own checksum, which names the damaged records when the payload
//! checksum fails. Segments of 2 MiB or more are memory-mapped and verified in one pass with
//! no copy; smaller ones are read, because mapping and unmapping a small file costs more than
//! copying it ([`DiskCache::with_mmap_threshold`]). `docs/performance.md` records the measured
//! ratio of verified cache reads to plain page-cache reads of the same bytes.
//!
//! # Errors
//!
//! Everything returns kiln-ml-cache's [`Error`]. An inner source's own error is kept whole as the
//! source of a `kiln_ml_core::ReadError::Source` ([`Error::Read`]), next to the block it failed
//! on; kiln-ml-data's `Error` converts
//! such an error back into the Parquet error it wraps, so a loader over a cache reports what it
//! would report without one.
//!
//! # Example
//!
//! Cache a transform's outputs over an in-memory source (kiln-ml-data's `ParquetSource` takes its
//! place in training), build the cache up front, and read it back:
//!
//! ```
//! use kiln_ml_cache::{Cached, DiskCache, PodCodec};
//! use kiln_ml_core::{transform_fn, BlockSource};
//! use kiln_ml_testkit::MemorySource;
//!
//! // Two files of sample ids: blocks of 3 and 2 samples, then one block of 4.
//! let source = || MemorySource::with_ids(&[&[3, 2], &[4]]);
//! // The expensive preprocessing; its name and version are part of the cache key.
//! let features = transform_fn("features", 1, |id: u64| {
//!     Ok::<_, std::convert::Infallible>(vec![id as f32, (id * id) as f32])
//! });
//!
//! let dir = tempfile::tempdir()?;
//! let cached = Cached::new(source(), features.clone(), DiskCache::open(dir.path())?)
//!     .with_codec(PodCodec) // `Vec<f32>` stored as its memory
//!     .with_ram_budget(64 << 20); // a RAM tier of 64 MiB over the disk
//! let report = cached.warm()?; // every segment built, in parallel
//! assert_eq!((report.blocks, report.built), (3, 3));
//!
//! assert_eq!(cached.read_block(1)?, vec![vec![3.0, 9.0], vec![4.0, 16.0]]); // from disk
//! assert_eq!(cached.read_block(1)?, vec![vec![3.0, 9.0], vec![4.0, 16.0]]); // from RAM
//! let stats = cached.stats();
//! assert_eq!((stats.disk_hits, stats.ram_hits), (1, 1));
//! // Plain numeric records are viewed in place, with no copy.
//! let segment = cached.disk().get(&cached.key(1))?.expect("warmed");
//! assert_eq!(segment.pod_record::<f32>(1), Some(&[4.0f32, 16.0][..]));
//!
//! // The next run finds every segment: nothing is computed again.
//! let again = Cached::new(source(), features, DiskCache::open(dir.path())?).with_codec(PodCodec);
//! assert_eq!(again.warm()?.already_cached, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cached;
mod codec;
mod disk;
mod error;
mod ram;
mod segment;
mod serde_layout;
mod stats;
#[cfg(test)]
mod test_support;
mod warm;

pub use cached::Cached;
pub use codec::{BincodeCodec, Codec, CodecError, PodCodec};
pub use disk::{DEFAULT_MMAP_THRESHOLD, DiskCache};
pub use error::{Error, Result};
pub use ram::RamCache;
pub use segment::{FORMAT_VERSION, Segment, SegmentBuilder, SegmentKey};
pub use stats::{CacheStats, CorruptSegment};
pub use warm::WarmReport;

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
