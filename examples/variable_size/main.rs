//! Variable-size samples: fixed-count random batches, fixed-count block shuffle, and
//! size-budget length-aware block shuffle, over generated IceCube-like events.
//!
//! 1. Writes `--events` events over `--files` Snappy Parquet files in row groups of at most
//!    `--row-group-events`: each event's detector pulses in one list column (4 floats a pulse),
//!    their count log-normal (median `--median-pulses`, σ = 1) clipped to 10-5,000, and the
//!    count again in an `n_pulses` column.
//! 2. Reads every event's size from `n_pulses` alone (`ParquetSourceBuilder::sample_sizes`).
//! 3. Runs epochs through kiln-ml-data's `Loader` (columnar collation, each batch's pulses
//!    padded to its longest event with a mask) under three plans, `--repeats` rounds side by
//!    side:
//!    - `random`: `RandomSampler`, `--batch-size` events per batch;
//!    - `block_shuffle`: `BlockShuffleSampler` (default K and S), `--batch-size` events;
//!    - `length_aware`: `BlockShuffleConfig::length_aware`: the same block shuffle, its shuffle
//!      buffer's events grouped by size and cut into batches of at most `--budget` padded
//!      elements (`rows × longest`), the batches of each window shuffled.
//!
//!    Every batch is checked against its plan (the same events, in order, each exactly once per
//!    epoch), and a length-aware epoch is stopped halfway and resumed: `length_aware_resume_exact`
//!    says whether the two halves make the uninterrupted epoch.
//! 4. Reports, for each plan (keys prefixed `random_`, `block_shuffle_`, `length_aware_`):
//!    `padding_waste` (padding over real elements, `(rows × longest − pulses) / pulses` summed
//!    over batches), `rows_per_s` (events, median over rounds), `batches_per_epoch`,
//!    `peak_batch_elements` (largest `rows × longest`), `mean_batch_elements` (real pulses per
//!    batch) and `distinct_files_per_batch` (mean over the plan's batches).
//!
//! Run: `cargo run --release --example variable_size -- --json out.json`

mod epochs;
mod events;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use kiln_ml::core::{BlockLayout, Plan, PlanRequest, Sampler};
use kiln_ml::data::{Loader, LoaderConfig, ParquetSource};
use kiln_ml::sampler::quality::{self, QualityOptions};
use kiln_ml::sampler::{BlockShuffleConfig, RandomSampler, RemainderPolicy, Sharding};
use kiln_ml_examples::cli::at_least_one;
use serde_json::{Map, Value, json};

use epochs::{EpochFigures, padded_collate, run_epoch};
use events::{EventSpec, write_events};
use kiln_ml_examples::timing::median;

/// Fixed-count random and block-shuffle batches against size-budget length-aware batches over
/// IceCube-like events of 10-5,000 pulses.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of Parquet files.
    #[arg(long, default_value_t = 200)]
    files: u32,
    /// Events over all files.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Largest row group, in events.
    #[arg(long, default_value_t = 128, value_parser = at_least_one::<usize>)]
    row_group_events: usize,
    /// Median pulses per event (log-normal, σ = 1, clipped to 10-5,000).
    #[arg(long, default_value_t = 150.0)]
    median_pulses: f64,
    /// Events per batch of the fixed-count plans (at least 2, at most --events).
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<u64>)]
    batch_size: u64,
    /// Padded elements (`rows × longest` pulses) per length-aware batch at most (default 16,384:
    /// about a 64-event batch's real pulses at the default median, so the plans make about as
    /// many batches).
    #[arg(long, default_value_t = 16_384, value_parser = at_least_one::<u64>)]
    budget: u64,
    /// Loader worker threads (default: the loader's, the available parallelism up to 8).
    #[arg(long, value_parser = at_least_one::<usize>)]
    workers: Option<usize>,
    /// Rounds of one epoch per plan, side by side (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = at_least_one::<u64>)]
    repeats: u64,
    /// Seed of the dataset and of the samplers.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the dataset here instead of a temporary directory (rewritten on each run).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// The three plans compared, by their JSON prefix.
const PLANS: [&str; 3] = ["random", "block_shuffle", "length_aware"];

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.files > 0 && args.events >= u64::from(args.files),
        "need at least one file and one event per file"
    );
    ensure!(
        args.batch_size > 0 && args.budget > 0 && args.repeats > 0,
        "--batch-size, --budget and --repeats must be at least 1"
    );
    // The mixing measures need two samples per batch and one whole batch: checked before the
    // epochs run, not after them.
    ensure!(
        args.batch_size >= 2 && args.events >= args.batch_size,
        "--batch-size must be at least 2 and at most --events ({}), got {}",
        args.events,
        args.batch_size
    );
    ensure!(
        (f64::from(*events::PULSES.start())..=f64::from(*events::PULSES.end()))
            .contains(&args.median_pulses),
        "--median-pulses must be within 10-5,000, got {}",
        args.median_pulses
    );
    let temp = tempfile::tempdir()?;
    let dir = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating --dir {}", dir.display()))?;
            dir.clone()
        }
        None => temp.path().to_owned(),
    };
    let spec = EventSpec {
        files: args.files,
        events: args.events,
        row_group_events: args.row_group_events,
        median_pulses: args.median_pulses,
        seed: args.seed,
    };
    let (paths, dataset_bytes) = write_events(&spec, &dir)?;
    let sizes: Arc<[u64]> = ParquetSource::builder()
        .files(paths.clone())
        .sample_sizes("n_pulses")?
        .into();
    let source = ParquetSource::builder()
        .files(paths)
        .columns(["event_id", "pulses"])
        .build()?;
    let mut config = LoaderConfig::new();
    if let Some(workers) = args.workers {
        config = config.with_workers(workers);
    }
    let workers = config.workers;
    let loader = Loader::new(source, padded_collate(), config)?;
    let layout: &dyn BlockLayout = loader.source().as_ref();

    // Uneven: one rank, every event exactly once, the last fixed-count batch short.
    let sharding = Sharding::new(args.batch_size, RemainderPolicy::Uneven);
    let samplers: [Box<dyn Sampler>; 3] = [
        Box::new(RandomSampler::new(sharding)),
        Box::new(
            BlockShuffleConfig::default()
                .with_sharding(sharding)
                .init()?,
        ),
        Box::new(
            BlockShuffleConfig::default()
                .with_sharding(sharding)
                .length_aware(args.budget, true, Arc::clone(&sizes))?,
        ),
    ];
    println!(
        "{} events over {} files ({:.1} MB), {} pulses, {workers} workers",
        args.events,
        args.files,
        dataset_bytes as f64 / 1e6,
        sizes.iter().sum::<u64>()
    );

    let mut rounds: Vec<Vec<EpochFigures>> = vec![Vec::new(); PLANS.len()];
    let mut plans: Vec<Option<Plan>> = vec![None; PLANS.len()];
    for round in 0..args.repeats {
        for (index, sampler) in samplers.iter().enumerate() {
            let plan = sampler.plan(layout, &PlanRequest::new(args.seed, round))?;
            plans[index] = Some(plan.clone());
            rounds[index].push(run_epoch(&loader, plan, args.events, PLANS[index])?);
        }
    }

    let mut figures = Map::new();
    let options = QualityOptions::new(args.batch_size as usize);
    println!(
        "{:>14} {:>9} {:>8} {:>9} {:>10} {:>10} {:>8}",
        "plan", "rows/s", "batches", "waste", "peak", "mean", "files"
    );
    for (index, name) in PLANS.iter().enumerate() {
        let plan = plans[index].as_ref().expect("at least one round");
        let report = quality::measure_plan(layout, plan, Some(&sizes), &options)?;
        let batches = report.batches.expect("measure_plan measures the batches");
        let planned = batches.sizes.expect("sizes were given");
        let last = rounds[index].last().expect("at least one round");
        // The plan's own figures and the delivered batches must agree.
        if (planned.padding_waste - last.padding_waste()).abs() > 1e-9
            || planned.max_padded_elements != last.peak_batch_elements
        {
            bail!(
                "{name}: the delivered batches' padding ({}, peak {}) is not the plan's ({}, peak {})",
                last.padding_waste(),
                last.peak_batch_elements,
                planned.padding_waste,
                planned.max_padded_elements
            );
        }
        let rows_per_s = median(rounds[index].iter().map(EpochFigures::rows_per_s).collect());
        println!(
            "{name:>14} {rows_per_s:>9.0} {:>8} {:>9.3} {:>10} {:>10.0} {:>8.1}",
            last.batches,
            last.padding_waste(),
            last.peak_batch_elements,
            planned.mean_elements,
            batches.distinct_files_per_batch
        );
        let mut insert = |key: &str, value: Value| {
            figures.insert(format!("{name}_{key}"), value);
        };
        insert("padding_waste", json!(last.padding_waste()));
        insert("rows_per_s", json!(rows_per_s));
        insert("batches_per_epoch", json!(last.batches));
        insert("peak_batch_elements", json!(last.peak_batch_elements));
        insert("mean_batch_elements", json!(planned.mean_elements));
        insert("mean_batch_rows", json!(batches.mean_rows));
        insert(
            "distinct_files_per_batch",
            json!(batches.distinct_files_per_batch),
        );
        let all = |check: fn(&EpochFigures) -> bool| rounds[index].iter().all(check);
        insert(
            "every_sample_once",
            json!(all(|epoch| epoch.every_sample_once)),
        );
        insert("batches_match_plan", json!(all(|epoch| epoch.matches_plan)));
    }

    let resume_exact = resume_is_exact(&loader, samplers[2].as_ref(), args.seed)?;
    let value = |key: &str| figures[key].as_f64().unwrap_or(f64::NAN);
    let ratios = [
        (
            "length_aware_vs_block_shuffle_padding_waste",
            value("length_aware_padding_waste") / value("block_shuffle_padding_waste"),
        ),
        (
            "length_aware_vs_block_shuffle_rows_per_s",
            value("length_aware_rows_per_s") / value("block_shuffle_rows_per_s"),
        ),
        (
            "length_aware_peak_vs_budget",
            value("length_aware_peak_batch_elements") / args.budget as f64,
        ),
        (
            "length_aware_vs_block_shuffle_distinct_files",
            value("length_aware_distinct_files_per_batch")
                / value("block_shuffle_distinct_files_per_batch"),
        ),
    ];
    for (key, ratio) in ratios {
        println!("{key}: {ratio:.3}");
        figures.insert(key.to_owned(), json!(ratio));
    }
    println!("length-aware epoch resumed halfway equals the uninterrupted one: {resume_exact}");
    figures.insert("length_aware_resume_exact".to_owned(), json!(resume_exact));
    for (key, value) in [
        ("budget", json!(args.budget)),
        ("batch_size", json!(args.batch_size)),
        ("events", json!(args.events)),
        ("files", json!(args.files)),
        ("pulses", json!(sizes.iter().sum::<u64>())),
        ("dataset_bytes", json!(dataset_bytes)),
        ("workers", json!(workers)),
        ("repeats", json!(args.repeats)),
    ] {
        figures.insert(key.to_owned(), value);
    }
    // A `false` check fails the run once the figures are written (CI reads them too).
    let failed_checks = figures
        .iter()
        .filter(|(key, value)| {
            (key.ends_with("_every_sample_once") || key.ends_with("_batches_match_plan"))
                && value.as_bool() == Some(false)
        })
        .map(|(key, _)| key.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    args.output.write(&Value::Object(figures))?;
    ensure!(
        resume_exact,
        "the resumed length-aware epoch differs from the uninterrupted one"
    );
    ensure!(
        failed_checks.is_empty(),
        "the loader's epochs missed or repeated samples, or strayed from their plans: {failed_checks}"
    );
    Ok(())
}

/// Stops a length-aware epoch halfway, resumes it from its position, and compares the events of
/// the two halves with an uninterrupted epoch's.
fn resume_is_exact(
    loader: &Loader<
        ParquetSource,
        impl kiln_ml::data::Collate<kiln_ml::data::ArrowRow, Output = epochs::PaddedBatch> + 'static,
    >,
    sampler: &dyn Sampler,
    seed: u64,
) -> Result<bool> {
    let request = PlanRequest::new(seed, 1_000);
    let ids = |batches: Vec<epochs::PaddedBatch>| -> Vec<Vec<i64>> {
        batches.into_iter().map(|batch| batch.ids).collect()
    };
    let full = ids(loader
        .plan_epoch(sampler, &request)?
        .collect::<std::result::Result<_, _>>()?);
    let mut first = loader.plan_epoch(sampler, &request)?;
    let head: Vec<epochs::PaddedBatch> = first
        .by_ref()
        .take(full.len() / 2)
        .collect::<std::result::Result<_, _>>()?;
    let position = first.position();
    drop(first);
    let tail = loader
        .resume_epoch(sampler, &request, position)?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut resumed = ids(head);
    resumed.extend(ids(tail));
    Ok(resumed == full)
}
