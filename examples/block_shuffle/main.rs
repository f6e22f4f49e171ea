//! The 660-file scenario: block shuffle against sequential and naive random reads, and a
//! preprocessing cache against recomputing a CPU-heavy transform.
//!
//! 1. Writes a seeded synthetic dataset: `--rows` events of 80 bytes (16 float32 features, an
//!    int64 id and an int64 label) over `--files` Snappy Parquet files of uneven size (about
//!    20x between the smallest and the largest), in row groups of at most `--row-group-rows`.
//! 2. Measures full epochs through kiln-ml-data's `Loader` (warm page cache, `--workers` threads),
//!    collating column by column (`--collate columnar`, the default: `columnar_fn` over the
//!    decoded Arrow chunks) or per sample (`--collate per-sample`: a `RowDecoder` of `Row`s)
//!    into a `[batch, 16]` feature matrix and the batch's labels (what the peers' torch readers
//!    deliver), on the loader's default configuration unless told otherwise.
//!    Sequential and block-shuffle epochs run side by side in `--repeats` rounds of 3
//!    back-to-back epochs each (every epoch announces the next with `Epoch::prefetch_next`);
//!    the figures are the medians of the 2nd and 3rd epochs, and of the 1st for "one epoch with
//!    its start-up"; the block shuffle / sequential ratios are medians of per-round ratios, so
//!    load that drifts between rounds (a shared machine) cancels out, and which plan goes
//!    first alternates between rounds, so load that drifts within one favours neither:
//!    - sequential: `SequentialSampler`;
//!    - the decoder alone: parquet-rs decoding every row group on its own on `--workers`
//!      threads (rayon), from footers read before the clock as the loader's are, nothing
//!      batched, timed once per round; the loader's ratios to it are medians of
//!      per-round ratios;
//!    - naive per-sample random access: for each sample of a uniform permutation, open its file,
//!      parse the footer, decode its row group and keep one row, as a map-style dataset does. Only
//!      `--random-reads` reads are timed and the rate is extrapolated to the epoch;
//!    - block shuffle: `BlockShuffleSampler` with its default configuration (K = 192 open
//!      blocks, S = 16,384 buffered samples, stratified);
//!    - a CPU-heavy transform standing in for graph construction, cached with `Cached`: a cold
//!      epoch that preprocesses and writes the cache, then cache-hit epochs of the same plan.
//!      Every delivered sample is encoded and hashed in plan order in both, so
//!      `warm_equals_cold` says whether the cached samples are byte-identical to the fresh ones.
//! 3. Compares verified cache reads (segments under `--mmap-threshold` are read, larger ones
//!    memory-mapped) with plain reads of the same segment files from the page cache, both by
//!    `read()` and by mmap, on one thread (best of `--repeats`).
//!
//! Run: `cargo run --release --example block_shuffle -- --files 660 --rows 900000 --json out.json`

// The `--json` object has more keys than `serde_json::json!`'s default recursion allows.
#![recursion_limit = "256"]

mod caching;
mod graph;
mod reading;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use kiln_ml::core::BlockLayout;
use kiln_ml::data::{LoaderConfig, ParquetSource};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy, Sharding};
use kiln_ml_examples::cli::at_least_one;

use caching::{Caching, CachingSetup};
use graph::BuildGraph;
use kiln_ml_examples::shuffle_dataset::{DatasetSpec, row_decoder, write_dataset};
use kiln_ml_examples::timing::median;
use reading::{CollateMode, Job, OnlyPlan, Outcome, Reading, ReadingSetup};

/// Block shuffle vs sequential vs naive random reads over many Parquet files, and a
/// preprocessing cache vs recomputation.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of Parquet files.
    #[arg(long, default_value_t = 660)]
    files: u32,
    /// Total rows (events) over all files.
    #[arg(long, default_value_t = 900_000)]
    rows: u64,
    /// Largest row group; each file is cut into row groups of at most this many rows.
    #[arg(long, default_value_t = 1024, value_parser = at_least_one::<usize>)]
    row_group_rows: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<u64>)]
    batch_size: u64,
    /// Loader worker threads, also used for the naive random reads (default: the available
    /// parallelism, at most 8).
    #[arg(long, value_parser = at_least_one::<usize>)]
    workers: Option<usize>,
    /// Batches the loader assembles ahead of the consumer (default: the loader's own depth,
    /// as many as 64 MiB holds, here its upper bound of 256: these batches are small, 64 rows
    /// of 80 bytes, and a deep window lets the workers collate runs of batches per wake-up).
    #[arg(long, value_parser = at_least_one::<usize>)]
    prefetch_batches: Option<usize>,
    /// Seed of the dataset and of the samplers.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Naive random reads timed (the epoch rate is extrapolated from them).
    #[arg(long, default_value_t = 2000, value_parser = at_least_one::<usize>)]
    random_reads: usize,
    /// Smoothing rounds of the stand-in graph construction (its CPU cost per sample).
    #[arg(long, default_value_t = 128)]
    graph_rounds: u32,
    /// Rounds of back-to-back sequential and block-shuffle epochs, and cache-hit epochs
    /// (medians are reported), and of the page-cache comparison (the best is reported). Each
    /// round's chains last about a quarter of a second, and a shared machine's speed moves by
    /// more than the figures' differences from one round to the next: many rounds steady the
    /// medians.
    #[arg(long, default_value_t = 9, value_parser = at_least_one::<usize>)]
    repeats: usize,
    /// Write the dataset here instead of a temporary directory (rewritten on each run; it must
    /// be empty or hold an earlier run's files, no more of them than --files; the cache always
    /// goes to a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Cache segments of at least this many bytes are memory-mapped, smaller ones read (the
    /// example's segments are about 200 KB; 0 maps every one).
    #[arg(long, default_value_t = kiln_ml::cache::DEFAULT_MMAP_THRESHOLD)]
    mmap_threshold: u64,
    /// How the loader collates batches: column by column from the decoded Arrow chunks, or
    /// one decoded value per sample.
    #[arg(long, value_enum, default_value_t = CollateMode::Columnar)]
    collate: CollateMode,
    /// Time only this plan: `--repeats` rounds of its back-to-back epochs, each epoch's rows/s
    /// printed (and in `--json`), nothing else measured. A steady workload to profile, as
    /// docs/performance.md does: `perf record -F 2999 -- <this binary> --only block-shuffle ...`.
    #[arg(long, value_enum)]
    only: Option<OnlyPlan>,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let workers = args
        .workers
        .unwrap_or_else(|| LoaderConfig::default().workers);
    let mut config = LoaderConfig::new().with_workers(workers);
    if let Some(depth) = args.prefetch_batches {
        config = config.with_prefetch_batches(depth);
    }
    let temp_data = tempfile::tempdir()?;
    let data_dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => temp_data.path().to_owned(),
    };

    let started = Instant::now();
    let spec = DatasetSpec {
        files: args.files,
        rows: args.rows,
        row_group_rows: args.row_group_rows,
        seed: args.seed,
    };
    let (paths, dataset_bytes) = write_dataset(&spec, &data_dir)?;
    println!(
        "dataset: {} rows in {} files, {:.1} MB of Snappy Parquet in {} ({:.1} s to write)",
        args.rows,
        args.files,
        dataset_bytes as f64 / 1e6,
        data_dir.display(),
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let source = Arc::new(
        ParquetSource::builder()
            .files(&paths)
            .build_with(row_decoder())?,
    );
    println!(
        "footers: {} row groups (blocks) read in {:.3} s",
        source.num_blocks(),
        started.elapsed().as_secs_f64()
    );
    // `Uneven` keeps every event exactly once on a single rank.
    let sharding = Sharding::new(args.batch_size, RemainderPolicy::Uneven);
    let shuffle = BlockShuffleConfig::default()
        .with_batch_size(args.batch_size)
        .with_remainder(RemainderPolicy::Uneven)
        .init()?;
    let job = args.only.map_or(Job::Compare, Job::Only);
    let outcome = reading::measure(
        &ReadingSetup {
            source: &source,
            config,
            sharding,
            shuffle: &shuffle,
            batch_size: args.batch_size as usize,
            rounds: args.repeats as u64,
            seed: args.seed,
            random_reads: args.random_reads,
            paths: &paths,
            collate: args.collate,
        },
        job,
    )?;
    let reading = match outcome {
        Outcome::Compared(reading) => reading,
        Outcome::Epochs(epochs) => return report_epochs(&args, &epochs),
    };
    let cache_dir = tempfile::tempdir()?;
    let caching = caching::measure(
        &CachingSetup {
            paths: &paths,
            transform: BuildGraph {
                rounds: args.graph_rounds,
                neighbours: 3,
            },
            cache_dir: cache_dir.path(),
            mmap_threshold: args.mmap_threshold,
            shuffle: &shuffle,
            config,
            seed: args.seed,
            repeats: args.repeats,
        },
        row_decoder(),
    )?;
    print_report(&args, workers, &reading, &caching);
    if args.output.json.is_some() {
        let figures = json_report(
            &args,
            workers,
            source.num_blocks(),
            dataset_bytes,
            &reading,
            &caching,
        );
        args.output.write(&figures)?;
    }
    anyhow::ensure!(
        caching.warm_equals_cold,
        "the cached samples differ from freshly computed ones"
    );
    Ok(())
}

/// Prints (and writes, with `--json`) the epochs of `--only`: each round's, and the median of
/// the epochs after each chain's first (the steady state).
fn report_epochs(args: &Args, epochs: &[Vec<f64>]) -> Result<()> {
    for (round, rates) in epochs.iter().enumerate() {
        let rates: Vec<String> = rates.iter().map(|rate| format!("{rate:>12.0}")).collect();
        println!("round {round}: {} rows/s", rates.join(" "));
    }
    let steady = median(
        epochs
            .iter()
            .flat_map(|rates| rates[1..].to_vec())
            .collect(),
    );
    println!("steady (epochs after each chain's first, median): {steady:.0} rows/s");
    if args.output.json.is_some() {
        args.output.write(&serde_json::json!({
            "only": args.only.and_then(|plan| plan.to_possible_value()).map(|value| value.get_name().to_owned()),
            "collate": args.collate.name(),
            "rows": args.rows,
            "files": args.files,
            "repeats": args.repeats,
            "epoch_rows_per_s": epochs,
            "steady_rows_per_s": steady,
        }))?;
    }
    Ok(())
}

fn print_report(args: &Args, workers: usize, reading: &Reading, caching: &Caching) {
    let line = |label: &str, rows_per_s: f64| println!("{label:<46} {rows_per_s:>14.0}");
    println!();
    println!(
        "workers: {workers}, batch size {}, prefetch {} batches{}, {} collation, warm page cache",
        args.batch_size,
        reading.prefetch_batches,
        if args.prefetch_batches.is_some() {
            ""
        } else {
            " (the loader's default)"
        },
        args.collate.name()
    );
    println!("{:<46} {:>14}", "epoch", "rows/s");
    line(
        &format!("parquet-rs decoding alone ({workers} threads)"),
        reading.raw_decode_rows_per_s,
    );
    line(
        "sequential (back-to-back epochs)",
        reading.sequential_rows_per_s,
    );
    line(
        &format!(
            "naive random (extrapolated from {} reads)",
            reading.random_timed_reads
        ),
        reading.random_rows_per_s,
    );
    line(
        "block shuffle, default config (back-to-back)",
        reading.block_shuffle_rows_per_s,
    );
    line(
        "sequential, one epoch with its start-up",
        reading.sequential_first_epoch_rows_per_s,
    );
    line(
        "block shuffle, one epoch with its start-up",
        reading.block_shuffle_first_epoch_rows_per_s,
    );
    line(
        &format!(
            "cold: graph ({:.0} us/sample) + cache write",
            caching.graph_microseconds_per_sample
        ),
        caching.cold_preprocess_rows_per_s,
    );
    line("cache hits", caching.cached_rows_per_s);
    println!();
    println!(
        "loader vs the decoder alone: sequential {:.2}x, block shuffle {:.2}x",
        reading.sequential_vs_raw_decode, reading.block_shuffle_vs_raw_decode
    );
    println!(
        "block shuffle: {:.2}x sequential ({:.2}x for one epoch), {:.0}x naive random; plan built \
         in {:.3} s; loader holds at most {} samples",
        reading.block_shuffle_vs_sequential,
        reading.block_shuffle_vs_sequential_first_epoch,
        reading.block_shuffle_rows_per_s / reading.random_rows_per_s,
        reading.block_shuffle_plan_seconds,
        reading.block_shuffle_peak_samples_held
    );
    println!(
        "distinct files per batch of {}: block shuffle {:.1}, sequential {:.1}, uniform ideal {:.1}",
        reading.quality_batch_size,
        reading.block_shuffle_distinct_files_per_batch,
        reading.sequential_distinct_files_per_batch,
        reading.ideal_distinct_files_per_batch
    );
    println!(
        "cache: {:.1}x the cold epoch; {:.1} MB in {} segments; cold epoch {} misses, then {} disk \
         hits; cached samples byte-identical to fresh ones: {}",
        caching.cached_rows_per_s / caching.cold_preprocess_rows_per_s,
        caching.cache_bytes as f64 / 1e6,
        caching.segments,
        caching.cold_misses,
        caching.disk_hits,
        caching.warm_equals_cold
    );
    println!(
        "first batch after {:.0} ms in the cold epoch, {:.1} ms in a cache-hit epoch",
        caching.cold_first_batch_seconds * 1e3,
        caching.cached_first_batch_seconds * 1e3
    );
    println!(
        "verified cache reads {:.2} GB/s vs plain page-cache reads of the same files: read() {:.2} \
         GB/s ({:.2}x), mmap {:.2} GB/s ({:.2}x)",
        caching.cache_read_bytes_per_s / 1e9,
        caching.page_cache_bytes_per_s / 1e9,
        caching.cache_read_bytes_per_s / caching.page_cache_bytes_per_s,
        caching.page_cache_mmap_bytes_per_s / 1e9,
        caching.cache_read_bytes_per_s / caching.page_cache_mmap_bytes_per_s
    );
}

fn json_report(
    args: &Args,
    workers: usize,
    blocks: usize,
    dataset_bytes: u64,
    reading: &Reading,
    caching: &Caching,
) -> serde_json::Value {
    serde_json::json!({
        "files": args.files,
        "rows": args.rows,
        "row_group_rows": args.row_group_rows,
        "blocks": blocks,
        "batch_size": args.batch_size,
        "workers": workers,
        "prefetch_batches": reading.prefetch_batches,
        "prefetch_batches_default": args.prefetch_batches.is_none(),
        "seed": args.seed,
        "repeats": args.repeats,
        "dataset_bytes": dataset_bytes,
        "collate": args.collate.name(),
        "raw_decode_rows_per_s": reading.raw_decode_rows_per_s,
        "sequential_vs_raw_decode": reading.sequential_vs_raw_decode,
        "block_shuffle_vs_raw_decode": reading.block_shuffle_vs_raw_decode,
        "sequential_rows_per_s": reading.sequential_rows_per_s,
        "random_rows_per_s": reading.random_rows_per_s,
        "random_timed_reads": reading.random_timed_reads,
        "random_rows_per_s_is_extrapolated": true,
        "block_shuffle_rows_per_s": reading.block_shuffle_rows_per_s,
        "quality_batch_size": reading.quality_batch_size,
        "block_shuffle_distinct_files_per_batch": reading.block_shuffle_distinct_files_per_batch,
        "sequential_distinct_files_per_batch": reading.sequential_distinct_files_per_batch,
        "ideal_distinct_files_per_batch": reading.ideal_distinct_files_per_batch,
        "block_shuffle_vs_sequential": reading.block_shuffle_vs_sequential,
        "block_shuffle_vs_random": reading.block_shuffle_rows_per_s / reading.random_rows_per_s,
        "sequential_first_epoch_rows_per_s": reading.sequential_first_epoch_rows_per_s,
        "block_shuffle_first_epoch_rows_per_s": reading.block_shuffle_first_epoch_rows_per_s,
        "block_shuffle_vs_sequential_first_epoch": reading.block_shuffle_vs_sequential_first_epoch,
        "block_shuffle_plan_seconds": reading.block_shuffle_plan_seconds,
        "block_shuffle_peak_samples_held": reading.block_shuffle_peak_samples_held,
        "graph_rounds": args.graph_rounds,
        "graph_microseconds_per_sample": caching.graph_microseconds_per_sample,
        "cold_preprocess_rows_per_s": caching.cold_preprocess_rows_per_s,
        "cached_rows_per_s": caching.cached_rows_per_s,
        "cached_vs_cold": caching.cached_rows_per_s / caching.cold_preprocess_rows_per_s,
        "cold_first_batch_seconds": caching.cold_first_batch_seconds,
        "cached_first_batch_seconds": caching.cached_first_batch_seconds,
        "warm_equals_cold": caching.warm_equals_cold,
        "cache_bytes": caching.cache_bytes,
        "page_cache_bytes_per_s": caching.page_cache_bytes_per_s,
        "cache_read_bytes_per_s": caching.cache_read_bytes_per_s,
        "cache_vs_page_cache_ratio": caching.cache_read_bytes_per_s / caching.page_cache_bytes_per_s,
        "page_cache_mmap_bytes_per_s": caching.page_cache_mmap_bytes_per_s,
        "mmap_threshold": args.mmap_threshold,
        "cache_vs_page_cache_mmap_ratio":
            caching.cache_read_bytes_per_s / caching.page_cache_mmap_bytes_per_s,
    })
}
