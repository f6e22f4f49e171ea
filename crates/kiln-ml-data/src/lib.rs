//! Parquet block sources and a deterministic prefetching loader that feeds Burn.
//!
//! kiln-ml-data implements the data side of kiln-ml-core's seams and pairs with `kiln-ml-sampler`, whose
//! samplers turn a [`BlockLayout`](kiln_ml_core::BlockLayout) into epoch
//! [`Plan`](kiln_ml_core::Plan)s, and with `kiln-ml-cache`, whose [`Cached`](kiln_ml_cache::Cached)
//! caches preprocessed samples between the two:
//!
//! | piece | what it does | seam |
//! |---|---|---|
//! | [`ParquetSource`] | files, directories or globs; one row group per block; footers read once; column projection; whole row groups decoded through a [`RowDecoder`] | `BlockLayout` + `BlockSource` |
//! | [`Cached`](kiln_ml_cache::Cached) (kiln-ml-cache) | applies a `Transform` per sample and caches the outputs per block on disk (verified, atomic, LRU-limited) and optionally in RAM | `BlockLayout` + `BlockSource` around an inner one |
//! | [`columnar_fn`], [`BurnColumnar`] | columnar batches: a batch's rows gathered from their decoded Arrow chunks column by column, in plan order, then turned into tensors ([`float_matrix`], [`int_vector`]) | a [`Collate`] of [`ArrowRow`]s |
//! | [`Loader`] | executes a `Plan` with persistent workers, bounded prefetch and read-ahead, strictly ordered batches and overlapping back-to-back epochs ([`Epoch::prefetch_next`]); collates with a closure ([`collate_fn`]) or any Burn `Batcher` ([`BurnCollate`]); reports wait times to `Observer`s | consumes `BlockSource`, `Plan` |
//!
//! They compose by wrapping: `Loader<Cached<ParquetSource<D>, T>, C>` reads row groups, decodes
//! them, transforms and caches the samples, and collates batches.
//!
//! # Errors and the cache
//!
//! kiln-ml-data's [`Error`] names the file, row group, column and row of what failed. A cache's
//! own failures (a transform that rejects a sample, a sample that does not encode) arrive as
//! [`Error::Cache`]; a Parquet error that a cache only passed on from the source under it is
//! unwrapped, so it reads the same with or without the cache. kiln-ml-cache is re-exported as
//! [`cache`] so that matching on [`Error::Cache`] needs no second dependency.
//!
//! # Example
//!
//! Write a small Parquet file, cache a transform of its rows, and load batches in plan order
//! (with a test sampler here; use `kiln-ml-sampler`'s block shuffle in training):
//!
//! ```
//! use std::sync::Arc;
//! use kiln_ml_cache::{Cached, DiskCache};
//! use kiln_ml_core::{transform_fn, PlanRequest};
//! use kiln_ml_data::arrow_array::types::Float32Type;
//! use kiln_ml_data::arrow_array::{Float32Array, RecordBatch};
//! use kiln_ml_data::parquet::arrow::ArrowWriter;
//! use kiln_ml_data::parquet::file::properties::WriterProperties;
//! use kiln_ml_data::{
//!     collate_fn, decoder_fn, required_values, Loader, LoaderConfig, ParquetSource,
//! };
//! use kiln_ml_testkit::InOrderSampler;
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

mod cache_hint;
mod columnar;
mod error;
mod interner;
mod load;
mod parquet_source;
mod scatter_hint;

/// The Parquet crate kiln-ml-data reads with (and examples write with).
pub use ::parquet;
/// The Arrow array crate kiln-ml-data decodes into (`RecordBatch`, arrays, types).
pub use arrow_array;
/// The Arrow schema crate (`Schema`, `Field`, `DataType`).
pub use arrow_schema;
/// The preprocessing cache crate, whose errors [`Error::Cache`] carries.
pub use kiln_ml_cache as cache;

pub use columnar::{
    BurnColumnar, ColumnBatcher, PackedSequences, PaddedSequences, columnar_fn, float_matrix,
    gather_rows, int_vector, packed_list, padded_list,
};
pub use error::{Error, Result};
pub use load::{
    BurnCollate, Collate, CollateFn, Epoch, Loader, LoaderConfig, LoaderResidency, NoCollate,
    Staged, TensorCreation, collate_fn,
};
pub use parquet_source::{
    ArrowRow, ArrowRows, DecodeError, FnDecoder, ParquetSource, ParquetSourceBuilder, RetryPolicy,
    RowDecoder, column, decoder_fn, primitive, reject_nulls, required_values,
};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
