//! Epochs from an object store against the same epochs from local disk.
//!
//! Reads the same Parquet dataset from a URL (`--url s3://bucket/prefix/`; `gs://`, `az://` and
//! `http(s)://` with `--features gcs`, `azure` or `http` on the `cargo run` command line) and
//! from a local directory (`--dir`), with the same samplers and seed, through the
//! loader's columnar path, in `--repeats` rounds of one sequential and one block-shuffled epoch
//! from each. Reports whether both deliver the same samples in the same order, and the rates
//! (medians over rounds). `--write` first writes the `block_shuffle` example's dataset into
//! `--dir` (for uploading it).
//!
//! `benches/object_store/run.sh` runs it against a local S3-compatible server (moto): it starts
//! the server, uploads the 660-file dataset and passes `--json PATH` through.
//!
//! Run: `cargo run --release --example object_store -- --dir DATA --write` (writes the data),
//! then `cargo run --release --example object_store -- --dir DATA --url s3://bucket/data/
//! --store-option aws_endpoint=http://127.0.0.1:9000 --store-option aws_allow_http=true
//! --json out.json` (plain HTTP must be allowed by name, as `benches/object_store/run.sh` does).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use kiln_ml::core::{BlockLayout, PlanRequest, Sampler};
use kiln_ml::data::arrow_array::RecordBatch;
use kiln_ml::data::{Loader, LoaderConfig, ParquetSource, columnar_fn, float_matrix, int_vector};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy, SequentialSampler, Sharding};
use kiln_ml_examples::cli::at_least_one;
use kiln_ml_examples::shuffle_dataset::{DatasetSpec, FEATURES, write_dataset};
use kiln_ml_examples::timing::{median, progress};

/// The same epochs from an object store and from local disk: order and rates.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The local copy of the dataset.
    #[arg(long)]
    dir: PathBuf,
    /// Write the `block_shuffle` example's dataset into `--dir` first (then read it unless
    /// no `--url` is given).
    #[arg(long)]
    write: bool,
    /// The dataset in an object store: a prefix such as `s3://bucket/data/`.
    #[arg(long)]
    url: Option<String>,
    /// An `object_store` option for the URL's store, `KEY=VALUE` (repeatable):
    /// `aws_endpoint=http://127.0.0.1:9000`, `aws_allow_http=true`, ...
    #[arg(long = "store-option", value_name = "KEY=VALUE")]
    store_options: Vec<String>,
    /// Files written by `--write`.
    #[arg(long, default_value_t = 660, value_parser = at_least_one::<u32>)]
    files: u32,
    /// Rows written by `--write`.
    #[arg(long, default_value_t = 900_000)]
    rows: u64,
    /// Largest row group written by `--write`.
    #[arg(long, default_value_t = 1024, value_parser = at_least_one::<usize>)]
    row_group_rows: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<u64>)]
    batch_size: u64,
    /// Loader worker threads (default: the available parallelism, at most 8).
    #[arg(long, value_parser = at_least_one::<usize>)]
    workers: Option<usize>,
    /// Batches the loader assembles ahead of the consumer (deep, as an object store's latency
    /// asks; the loader's own default sizes the window by `prefetch_bytes`, docs/data.md).
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<usize>)]
    prefetch_batches: usize,
    /// Blocks the loader reads ahead of the batches it assembles: for an object store, the
    /// row groups in flight.
    #[arg(long, default_value_t = 32)]
    read_ahead_blocks: usize,
    /// Seed of the dataset and of the samplers.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Rounds (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one::<usize>)]
    repeats: usize,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.write {
        let spec = DatasetSpec {
            files: args.files,
            rows: args.rows,
            row_group_rows: args.row_group_rows,
            seed: args.seed,
        };
        let (paths, bytes) = write_dataset(&spec, &args.dir)?;
        println!(
            "wrote {} files, {:.1} MB, to {}",
            paths.len(),
            bytes as f64 / 1e6,
            args.dir.display()
        );
    }
    let Some(url) = &args.url else {
        if args.write {
            if let Some(json) = &args.output.json {
                println!(
                    "no --url: nothing was read, so no figures for {}",
                    json.display()
                );
            }
            return Ok(());
        }
        bail!("nothing to do: give --url (and --dir), or --write");
    };
    // Only the columns the batches use, named: a dataset without them (not one `--write`
    // produces) fails here, naming the column and the file, not in a loader worker.
    let columns = || std::iter::once("id").chain(FEATURES);
    let mut remote_builder = ParquetSource::builder().url(url).columns(columns());
    for option in &args.store_options {
        let (key, value) = option
            .split_once('=')
            .with_context(|| format!("--store-option {option:?} is not KEY=VALUE"))?;
        remote_builder = remote_builder.store_option(key, value);
    }
    let local_builder = ParquetSource::builder().dir(&args.dir).columns(columns());
    let started = Instant::now();
    let remote = remote_builder.clone().build()?;
    let remote_open_seconds = started.elapsed().as_secs_f64();
    let local = local_builder.clone().build()?;
    let rows = local.num_samples();
    println!(
        "{url}: {} objects, {} row groups, footers in {remote_open_seconds:.2} s; {}: {} files",
        remote.num_files(),
        remote.num_blocks(),
        args.dir.display(),
        local.num_files()
    );
    let same_layout = remote.blocks().len() == local.blocks().len()
        && remote
            .blocks()
            .iter()
            .zip(local.blocks())
            .all(|(a, b)| a.rows == b.rows);
    if !same_layout {
        bail!("{url} and {} hold different row groups", args.dir.display());
    }

    let workers = args
        .workers
        .unwrap_or_else(|| LoaderConfig::default().workers);
    let config = LoaderConfig::new()
        .with_workers(workers)
        .with_prefetch_batches(args.prefetch_batches)
        .with_read_ahead_blocks(args.read_ahead_blocks);
    // Each batch: its ids (to compare the order) and its feature matrix (the work a training
    // batch needs).
    let collate = || {
        columnar_fn(|columns: RecordBatch| {
            // Projected and checked when the sources were built.
            let ids = int_vector(&columns, "id").expect("the projected id column");
            let features = float_matrix(&columns, &FEATURES).expect("the projected features");
            (ids, features)
        })
    };
    let remote = Loader::new(remote, collate(), config)?;
    let local = Loader::new(local, collate(), config)?;
    let sharding = Sharding::new(args.batch_size, RemainderPolicy::Uneven);
    let sequential = SequentialSampler::new(sharding);
    let shuffle = BlockShuffleConfig::default()
        .with_batch_size(args.batch_size)
        .with_remainder(RemainderPolicy::Uneven)
        .init()?;
    let samplers: [(&str, &dyn Sampler); 2] =
        [("sequential", &sequential), ("block shuffle", &shuffle)];

    let mut figures = Figures::default();
    for round in 0..args.repeats.max(1) as u64 {
        for (index, (name, sampler)) in samplers.iter().enumerate() {
            let request = PlanRequest::new(args.seed, round);
            let (local_ids, local_seconds) = run_epoch(&local, *sampler, &request, name)?;
            let (remote_ids, remote_seconds) = run_epoch(&remote, *sampler, &request, name)?;
            figures.same_order &= remote_ids == local_ids;
            figures.local_rows = local_ids.len() as u64;
            figures.remote_rows = remote_ids.len() as u64;
            figures.seconds[index].0.push(local_seconds);
            figures.seconds[index].1.push(remote_seconds);
        }
    }
    let rate = |seconds: &[f64]| rows as f64 / median(seconds.to_vec());
    let [
        (sequential_local, sequential_remote),
        (shuffle_local, shuffle_remote),
    ] = &figures.seconds;
    println!();
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "epoch (rows/s)", "local disk", url, "ratio"
    );
    for (name, local_seconds, remote_seconds) in [
        ("sequential", sequential_local, sequential_remote),
        ("block shuffle", shuffle_local, shuffle_remote),
    ] {
        let (local_rate, remote_rate) = (rate(local_seconds), rate(remote_seconds));
        println!(
            "{name:<34} {local_rate:>14.0} {remote_rate:>14.0} {:>7.2}x",
            remote_rate / local_rate
        );
    }
    println!(
        "same samples in the same order: {} ({} rows from the store, {} from disk per epoch)",
        figures.same_order, figures.remote_rows, figures.local_rows
    );
    if args.output.json.is_some() {
        let json = serde_json::json!({
            "url": url,
            "files": remote.source().num_files(),
            "blocks": remote.source().num_blocks(),
            "workers": workers,
            "batch_size": args.batch_size,
            "prefetch_batches": args.prefetch_batches,
            "read_ahead_blocks": args.read_ahead_blocks,
            "repeats": args.repeats,
            "seed": args.seed,
            "remote_open_seconds": remote_open_seconds,
            "remote_rows": figures.remote_rows,
            "local_rows": figures.local_rows,
            "same_order": figures.same_order,
            // The block-shuffled epochs: the access pattern training uses.
            "remote_rows_per_s": rate(shuffle_remote),
            "local_rows_per_s": rate(shuffle_local),
            "remote_vs_local": rate(shuffle_remote) / rate(shuffle_local),
            "sequential_remote_rows_per_s": rate(sequential_remote),
            "sequential_local_rows_per_s": rate(sequential_local),
            "sequential_remote_vs_local": rate(sequential_remote) / rate(sequential_local),
            "remote_bytes_read": remote.source().bytes_read(),
        });
        args.output.write(&json)?;
    }
    if !figures.same_order {
        bail!("the store and the local disk delivered different samples or orders");
    }
    Ok(())
}

/// What the rounds measured.
struct Figures {
    same_order: bool,
    remote_rows: u64,
    local_rows: u64,
    /// Per sampler (sequential, block shuffle): local and remote epoch seconds.
    seconds: [(Vec<f64>, Vec<f64>); 2],
}

impl Default for Figures {
    fn default() -> Self {
        Self {
            same_order: true,
            remote_rows: 0,
            local_rows: 0,
            seconds: Default::default(),
        }
    }
}

type Batch = (Vec<i64>, Vec<f32>);

/// Runs one epoch; returns every id delivered, in order, and the seconds it took.
fn run_epoch<S, C>(
    loader: &Loader<S, C>,
    sampler: &dyn Sampler,
    request: &PlanRequest,
    name: &'static str,
) -> Result<(Vec<i64>, f64)>
where
    S: kiln_ml::core::BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: kiln_ml::data::Collate<S::Item, Output = Batch> + 'static,
{
    let plan = sampler.plan(loader.source().as_ref(), request)?;
    let bar = progress(plan.batch_count(), name);
    let started = Instant::now();
    let mut ids = Vec::with_capacity(plan.len());
    for batch in loader.epoch(plan)? {
        let (batch_ids, features) = batch?;
        std::hint::black_box(features);
        ids.extend(batch_ids);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((ids, started.elapsed().as_secs_f64()))
}
