//! The preprocessing cache: a cold epoch against cache-hit epochs, and verified cache reads
//! against plain page-cache reads of the same bytes.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use kiln_ml::cache::{Cached, Codec, DiskCache};
use kiln_ml::core::{BlockLayout, BlockSource, Fingerprint, PlanRequest, Sampler, Transform};
use kiln_ml::data::{Loader, LoaderConfig, ParquetSource, RowDecoder};
use kiln_ml::sampler::BlockShuffleSampler;

use crate::graph::{BuildGraph, digest_collate};
use kiln_ml_examples::shuffle_dataset::Row;
use kiln_ml_examples::timing::{EpochTime, median, run_epoch};

/// The cache figures.
#[derive(Debug, Clone, Copy)]
pub struct Caching {
    /// The transform alone, on one core.
    pub graph_microseconds_per_sample: f64,
    /// The cold epoch: Parquet, transform, cache write.
    pub cold_preprocess_rows_per_s: f64,
    /// Cache-hit epochs of the same plan (median).
    pub cached_rows_per_s: f64,
    /// Time to the first batch of the cold epoch.
    pub cold_first_batch_seconds: f64,
    /// Time to the first batch of the cache-hit epochs (median).
    pub cached_first_batch_seconds: f64,
    /// Whether every cache-hit epoch delivered exactly the bytes of the cold one.
    pub warm_equals_cold: bool,
    /// Misses of the cold epoch.
    pub cold_misses: u64,
    /// Disk hits of the cache-hit epochs.
    pub disk_hits: u64,
    /// Segments.
    pub segments: usize,
    /// Bytes of all segments.
    pub cache_bytes: u64,
    /// Plain reads of the segment files (bytes/s, one thread).
    pub page_cache_bytes_per_s: f64,
    /// Plain memory-mapped reads of every byte of the segment files (bytes/s, one thread).
    pub page_cache_mmap_bytes_per_s: f64,
    /// Verified cache reads of the same bytes (bytes/s, one thread).
    pub cache_read_bytes_per_s: f64,
}

/// What the cache measurement needs.
pub struct CachingSetup<'a> {
    /// The dataset's files.
    pub paths: &'a [PathBuf],
    /// The transform to cache.
    pub transform: BuildGraph,
    /// An empty directory for the cache.
    pub cache_dir: &'a Path,
    /// Segments of at least this many bytes are memory-mapped.
    pub mmap_threshold: u64,
    /// The block shuffle whose epoch-0 plan every epoch uses.
    pub shuffle: &'a BlockShuffleSampler,
    /// Loader settings.
    pub config: LoaderConfig,
    /// Seed of the plan.
    pub seed: u64,
    /// Cache-hit epochs (and page-cache comparison repeats).
    pub repeats: usize,
}

/// Builds the cache in a cold epoch of a block-shuffle plan, then serves `repeats` epochs of the
/// same plan from it; every delivered sample is encoded and hashed in plan order in both.
pub fn measure<D: RowDecoder<Item = Row> + 'static>(
    setup: &CachingSetup<'_>,
    decoder: D,
) -> Result<Caching> {
    let CachingSetup {
        paths,
        transform,
        cache_dir,
        mmap_threshold,
        shuffle,
        config,
        seed,
        repeats,
    } = *setup;
    let source = ParquetSource::builder().files(paths).build_with(decoder)?;
    let graph_microseconds_per_sample = transform_cost(&source, &transform)?;
    let rows = source.num_samples() as f64;
    let cached = Arc::new(Cached::new(
        source,
        transform,
        DiskCache::open(cache_dir)?.with_mmap_threshold(mmap_threshold),
    ));
    let loader = Loader::with_shared_source(Arc::clone(&cached), digest_collate(), config)?;
    let plan = shuffle.plan(cached.as_ref(), &PlanRequest::new(seed, 0))?;
    let digest_epoch = |message: &'static str| -> Result<(EpochTime, Fingerprint, usize)> {
        let (mut digest, mut samples) = (Fingerprint::builder(), 0);
        let time = run_epoch(&loader, plan.clone(), message, |(count, batch)| {
            samples += count;
            digest = std::mem::take(&mut digest).fingerprint(batch);
        })?;
        Ok((time, digest.finish(), samples))
    };
    let (cold, cold_digest, cold_samples) = digest_epoch("cold preprocessing epoch")?;
    let cold_misses = cached.stats().misses;
    let (mut seconds, mut first_batch_seconds) = (Vec::new(), Vec::new());
    let mut warm_equals_cold = true;
    for _ in 0..repeats.max(1) {
        let (time, digest, samples) = digest_epoch("cache-hit epoch")?;
        warm_equals_cold &= digest == cold_digest && samples == cold_samples;
        seconds.push(time.seconds);
        first_batch_seconds.push(time.first_batch_seconds);
    }
    let disk_hits = cached.stats().disk_hits;
    let PageCacheComparison {
        bytes: cache_bytes,
        read_bytes_per_s: page_cache_bytes_per_s,
        mmap_bytes_per_s: page_cache_mmap_bytes_per_s,
        cache_bytes_per_s: cache_read_bytes_per_s,
    } = page_cache_comparison(&cached, repeats)?;
    Ok(Caching {
        graph_microseconds_per_sample,
        cold_preprocess_rows_per_s: rows / cold.seconds,
        cached_rows_per_s: rows / median(seconds),
        cold_first_batch_seconds: cold.first_batch_seconds,
        cached_first_batch_seconds: median(first_batch_seconds),
        warm_equals_cold,
        cold_misses,
        disk_hits,
        segments: cached.num_blocks(),
        cache_bytes,
        page_cache_bytes_per_s,
        page_cache_mmap_bytes_per_s,
        cache_read_bytes_per_s,
    })
}

/// The transform's own cost on one core, from the first blocks' rows (about 2,000).
fn transform_cost<D: RowDecoder<Item = Row>>(
    source: &ParquetSource<D>,
    transform: &BuildGraph,
) -> Result<f64> {
    let mut rows = Vec::new();
    for block in 0..source.num_blocks() as u32 {
        if rows.len() >= 2000 {
            break;
        }
        rows.extend(source.read_block(block)?);
    }
    let started = Instant::now();
    for row in &rows {
        black_box(transform.apply(*row)?);
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / rows.len().max(1) as f64)
}

/// Verified cache reads against plain page-cache reads of the same segment files.
struct PageCacheComparison {
    /// Bytes of all segments.
    bytes: u64,
    /// `std::fs::read` of every file.
    read_bytes_per_s: f64,
    /// Mapping every file and summing its 8-byte words.
    mmap_bytes_per_s: f64,
    /// `DiskCache::get` of every segment, verified, with the run's mmap threshold.
    cache_bytes_per_s: f64,
}

/// Times plain page-cache reads of the segment files (read and mapped) against verified cache
/// reads of the same bytes, one thread, best of `repeats`.
fn page_cache_comparison<S, T, C>(
    cached: &Cached<S, T, C>,
    repeats: usize,
) -> Result<PageCacheComparison>
where
    S: BlockSource + BlockLayout,
    T: Transform<S::Item>,
    C: Codec<T::Output>,
{
    let keys: Vec<_> = (0..cached.num_blocks() as u32)
        .map(|block| cached.key(block))
        .collect();
    let paths: Vec<PathBuf> = keys
        .iter()
        .map(|key| cached.disk().segment_path(key))
        .collect();
    let mut bytes = 0u64;
    for path in &paths {
        bytes += std::fs::read(path)?.len() as u64; // warms the page cache
    }
    let best = |seconds: &mut f64, started: Instant| {
        *seconds = seconds.min(started.elapsed().as_secs_f64());
    };
    let mut seconds = [f64::INFINITY; 3];
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        for path in &paths {
            black_box(std::fs::read(path)?);
        }
        best(&mut seconds[0], started);
        let started = Instant::now();
        for path in &paths {
            black_box(mapped_sum(path)?);
        }
        best(&mut seconds[1], started);
        let started = Instant::now();
        for key in &keys {
            let segment = cached.disk().get(key)?.context("a segment vanished")?;
            black_box(segment.byte_len());
        }
        best(&mut seconds[2], started);
    }
    let rate = |seconds: f64| bytes as f64 / seconds;
    Ok(PageCacheComparison {
        bytes,
        read_bytes_per_s: rate(seconds[0]),
        mmap_bytes_per_s: rate(seconds[1]),
        cache_bytes_per_s: rate(seconds[2]),
    })
}

/// Maps `path` and sums its whole 8-byte words: every byte brought in through the mapping.
fn mapped_sum(path: &Path) -> Result<u64> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the cache never modifies a segment file in place, and nothing else writes the
    // example's cache directory.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    Ok(map
        .chunks_exact(8)
        .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        .fold(0, u64::wrapping_add))
}
