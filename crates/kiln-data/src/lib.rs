//! Parquet block sources, a fingerprinted preprocessing cache and a deterministic prefetching
//! loader that feeds Burn.
//!
//! kiln-data implements the data side of kiln-core's seams and pairs with `kiln-sampler`, whose
//! samplers turn a [`BlockLayout`](kiln_core::BlockLayout) into epoch
//! [`Plan`](kiln_core::Plan)s:
//!
//! | piece | what it does | seam |
//! |---|---|---|
//! | [`ParquetSource`] | files, directories or globs; one row group per block; footers read once; column projection; whole row groups decoded through a [`RowDecoder`] | `BlockLayout` + `BlockSource` |
//! | [`Cached`] | applies a `Transform` per sample and caches the outputs per block: [`DiskCache`] (verified, atomic, LRU-limited; large segments memory-mapped) under an optional [`RamCache`]; [`Cached::warm`] builds it in parallel | `BlockLayout` + `BlockSource` around an inner one |
//! | [`Loader`] | executes a `Plan` with persistent workers, bounded prefetch and read-ahead, strictly ordered batches and overlapping back-to-back epochs ([`Epoch::prefetch_next`]); collates with a closure ([`collate_fn`]) or any Burn `Batcher` ([`BurnCollate`]); reports wait times to `Observer`s | consumes `BlockSource`, `Plan` |
//!
//! They compose by wrapping: `Loader<Cached<ParquetSource<D>, T>, C>` reads row groups, decodes
//! them, transforms and caches the samples, and collates batches.
//!
//! # Sample encoding in the cache
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
//! # Example
//!
//! Write a small Parquet file, cache a transform of its rows, and load batches in plan order
//! (with a test sampler here; use `kiln-sampler`'s block shuffle in training):
//!
//! ```
//! use std::sync::Arc;
//! use kiln_core::{transform_fn, PlanRequest};
//! use kiln_data::arrow_array::types::Float32Type;
//! use kiln_data::arrow_array::{Float32Array, RecordBatch};
//! use kiln_data::parquet::arrow::ArrowWriter;
//! use kiln_data::parquet::file::properties::WriterProperties;
//! use kiln_data::{
//!     collate_fn, decoder_fn, required_values, Cached, DiskCache, Loader, LoaderConfig,
//!     ParquetSource,
//! };
//! use kiln_testkit::InOrderSampler;
//!
//! let data = tempfile::tempdir()?;
//! let x = Float32Array::from_iter_values((0..100).map(|i| i as f32));
//! let batch = RecordBatch::try_from_iter([("x", Arc::new(x) as _)])?;
//! let properties = WriterProperties::builder().set_max_row_group_row_count(Some(30)).build();
//! let file = std::fs::File::create(data.path().join("part-0.parquet"))?;
//! let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties))?;
//! writer.write(&batch)?;
//! writer.close()?;
//!
//! // Row groups of 30, 30, 30 and 10 rows become four blocks of f32 samples.
//! let source = ParquetSource::builder().dir(data.path()).build_with(decoder_fn(
//!     "x",
//!     1,
//!     |batch: &RecordBatch| Ok(required_values::<Float32Type>(batch, "x")?.to_vec()),
//! ))?;
//! let square = transform_fn("square", 1, |x: f32| Ok::<_, std::convert::Infallible>(x * x));
//! let cache = tempfile::tempdir()?;
//! let cached = Cached::new(source, square, DiskCache::open(cache.path())?);
//! cached.warm()?;
//!
//! let loader = Loader::new(cached, collate_fn(|xs: Vec<f32>| xs), LoaderConfig::new())?;
//! let epoch = loader.plan_epoch(&InOrderSampler::new(32), &PlanRequest::new(0, 0))?;
//! let batches = epoch.collect::<Result<Vec<_>, _>>()?;
//! assert_eq!(batches.len(), 4);
//! assert_eq!(batches[0][3], 9.0);
//! assert_eq!(loader.source().stats().disk_hits, 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
mod error;
mod load;
mod parquet_source;

/// The Parquet crate kiln-data reads with (and examples write with).
pub use ::parquet;
/// The Arrow array crate kiln-data decodes into (`RecordBatch`, arrays, types).
pub use arrow_array;
/// The Arrow schema crate (`Schema`, `Field`, `DataType`).
pub use arrow_schema;

pub use cache::{
    BincodeCodec, CacheStats, Cached, Codec, CodecError, CorruptSegment, DEFAULT_MMAP_THRESHOLD,
    DiskCache, FORMAT_VERSION, PodCodec, RamCache, Segment, SegmentBuilder, SegmentKey, WarmReport,
};
pub use error::{BoxError, Error, Result};
pub use load::{
    BurnCollate, Collate, CollateFn, Epoch, Loader, LoaderConfig, MemoryBound, NoCollate,
    collate_fn,
};
pub use parquet_source::{
    ArrowRows, DecodeError, FnDecoder, ParquetSource, ParquetSourceBuilder, RowDecoder, column,
    decoder_fn, primitive, reject_nulls, required_values,
};
