//! Shuffle quality and plan cost of kiln's samplers on a layout shaped like a real dataset.
//!
//! Builds a seeded layout of `--files` files holding `--samples` rows in all (uneven file sizes,
//! each file cut into row groups of at most `--row-group-rows` rows), plans one epoch with each
//! order and measures it against a uniform permutation (see `kiln_ml::sampler::quality`):
//!
//! - `sequential`: layout order;
//! - `file_shuffle`: blocks (row groups) in a Fisher-Yates order, each read whole;
//! - `block_shuffle`: the default `BlockShuffleConfig` (or `--open-blocks`/`--buffer`);
//! - `block_shuffle_unstratified`: the same K and S without the stratified block order;
//! - `random`: a uniform permutation of all samples.
//!
//! Run: `cargo run --release --example shuffle_quality -- --files 660 --samples 900000 --batch 64`

use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kiln_ml::core::{BlockLayout, Fingerprint, Layout, Plan, PlanRequest, Sampler};
use kiln_ml::sampler::quality::{self, PlanResidency, QualityOptions, QualityReport, Stretch};
use kiln_ml::sampler::{BlockShuffleConfig, BlockShuffleSampler, RandomSampler, SequentialSampler};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

/// Compare the shuffle quality and plan cost of kiln's samplers.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of files in the synthetic layout.
    #[arg(long, default_value_t = 660)]
    files: u32,
    /// Total number of samples (rows) across all files.
    #[arg(long, default_value_t = 900_000, value_parser = kiln_ml_examples::cli::at_least_one::<u64>)]
    samples: u64,
    /// Batch size B the measures use (at least 2: they compare samples within a batch).
    #[arg(long, default_value_t = 64, value_parser = kiln_ml_examples::cli::at_least_two::<usize>)]
    batch: usize,
    /// Blocks open at once (K) for block_shuffle; default: BlockShuffleConfig's.
    #[arg(long)]
    open_blocks: Option<usize>,
    /// Shuffle-buffer window in samples (S) for block_shuffle; default: BlockShuffleConfig's.
    #[arg(long)]
    buffer: Option<usize>,
    /// Largest row group, in rows. Writers default to about a million rows, which would give one
    /// row group per file here; 1,024 is what a project tuning files for random access writes,
    /// and gives files of one to three row groups.
    #[arg(long, default_value_t = 1024)]
    row_group_rows: u64,
    /// Seed for the file sizes and the plans.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Epoch to plan.
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Plan builds timed per order; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    repeats: usize,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// Uneven file sizes summing to `samples`: weights log-uniform over a 4.5x range.
fn file_sizes(files: u32, samples: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let weights: Vec<f64> = (0..files)
        .map(|_| rng.random_range(0.0f64..1.5).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|w| (w / total * samples as f64).floor() as u64)
        .collect();
    let short = samples - sizes.iter().sum::<u64>();
    for size in sizes.iter_mut().take(short as usize) {
        *size += 1;
    }
    sizes
}

/// The layout: each file cut into row groups of at most `row_group_rows` rows.
fn build_layout(args: &Args) -> anyhow::Result<Layout> {
    anyhow::ensure!(args.files > 0, "--files must be at least 1");
    anyhow::ensure!(
        args.row_group_rows > 0,
        "--row-group-rows must be at least 1"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut builder = Layout::builder();
    for (file, rows) in file_sizes(args.files, args.samples, &mut rng)
        .into_iter()
        .enumerate()
    {
        let groups = rows.div_ceil(args.row_group_rows).max(1);
        // Equal row groups, as writers that split a file evenly produce.
        let row_groups: Vec<u64> = (0..groups)
            .map(|index| rows / groups + u64::from(index < rows % groups))
            .collect();
        let identity = Fingerprint::builder()
            .str("shuffle_quality")
            .u64(file as u64)
            .finish();
        builder.add_file(identity, &row_groups);
    }
    Ok(builder.build()?)
}

/// Builds the plan `repeats` times; returns the last plan and the median build time.
fn timed_plan(
    sampler: &dyn Sampler,
    layout: &Layout,
    request: &PlanRequest,
    repeats: usize,
) -> anyhow::Result<(Plan, f64)> {
    let mut seconds = Vec::with_capacity(repeats);
    let mut plan = None;
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        plan = Some(sampler.plan(layout, request)?);
        seconds.push(start.elapsed().as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    let plan = plan.context("at least one plan is built")?;
    Ok((plan, seconds[seconds.len() / 2]))
}

fn stretch_json(stretch: &Stretch) -> Value {
    let measured = &stretch.measured;
    let ideal = &stretch.ideal;
    json!({
        "positions": measured.positions,
        "distinct_files_per_batch": measured.distinct_files_per_batch,
        "ideal_distinct_files_per_batch": ideal.distinct_files_per_batch,
        "distinct_files_per_batch_p5": measured.distinct_files_per_batch_p5,
        "ideal_distinct_files_per_batch_p5": ideal.distinct_files_per_batch_p5,
        "same_file_pair_rate": measured.same_file_pair_rate,
        "ideal_same_file_pair_rate": ideal.same_file_pair_rate,
        "batch_file_entropy_bits": measured.batch_file_entropy_bits,
        "ideal_batch_file_entropy_bits": ideal.batch_file_entropy_bits,
        "lag_same_file_rate": measured.lag_same_file_rate.iter()
            .map(|lag| json!({"lag": lag.lag, "rate": lag.rate}))
            .collect::<Vec<_>>(),
        "decorrelation_lag": measured.decorrelation_lag,
        "spearman": measured.spearman,
        "ideal_spearman_sd": ideal.spearman_sd,
    })
}

fn order_json(
    name: &str,
    report: &QualityReport,
    plan: &Plan,
    seconds: f64,
    held: &PlanResidency,
) -> Value {
    let mut entry = stretch_json(&report.whole);
    let object = entry
        .as_object_mut()
        .expect("stretch_json builds an object");
    object.insert("name".into(), json!(name));
    object.insert("plan_seconds".into(), json!(seconds));
    object.insert("plan_bytes".into(), json!(plan.heap_bytes()));
    object.insert("max_resident_blocks".into(), json!(held.max_blocks));
    object.insert("max_resident_rows".into(), json!(held.max_rows));
    object.insert("mean_resident_rows".into(), json!(held.mean_rows));
    object.insert("first_window".into(), stretch_json(&report.first_window));
    object.insert("last_window".into(), stretch_json(&report.last_window));
    entry
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let layout = build_layout(&args)?;
    let defaults = BlockShuffleConfig::default();
    let block_config = defaults
        .with_open_blocks(args.open_blocks.unwrap_or(defaults.open_blocks))
        .with_buffer_samples(args.buffer.unwrap_or(defaults.buffer_samples));
    let orders: Vec<(&str, Box<dyn Sampler>)> = vec![
        ("sequential", Box::new(SequentialSampler::default())),
        (
            "file_shuffle",
            Box::new(BlockShuffleConfig::block_order_only().init()?),
        ),
        (
            "block_shuffle",
            Box::new(BlockShuffleSampler::new(block_config)?),
        ),
        (
            "block_shuffle_unstratified",
            Box::new(block_config.with_stratified(false).init()?),
        ),
        ("random", Box::new(RandomSampler::default())),
    ];
    let request = PlanRequest::new(args.seed, args.epoch);
    let options = QualityOptions::new(args.batch);

    // On stderr, hidden by indicatif when that is not a terminal.
    let progress = ProgressBar::new(orders.len() as u64);
    progress.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);

    let mut entries = Vec::new();
    let mut table = Vec::new();
    for (name, sampler) in &orders {
        progress.set_message(*name);
        let (plan, seconds) = timed_plan(sampler.as_ref(), &layout, &request, args.repeats)?;
        let report = quality::measure(&layout, plan.order(), &options)
            .with_context(|| format!("measuring {name}"))?;
        let held = quality::residency(&plan, &layout);
        entries.push(order_json(name, &report, &plan, seconds, &held));
        table.push(table_row(name, &report, &plan, seconds, &held));
        progress.inc(1);
    }
    progress.finish_and_clear();

    let ideal = &entries[0];
    println!(
        "{} files, {} blocks (row groups of at most {} rows), {} samples, batch {}; block_shuffle: K = {}, S = {}",
        layout.num_files(),
        layout.num_blocks(),
        args.row_group_rows,
        layout.num_samples(),
        args.batch,
        block_config.open_blocks,
        block_config.buffer_samples
    );
    println!(
        "ideal (uniform permutation): distinct/batch {:.1}, P* {:.5}, entropy {:.2} bits, |spearman| ~ {:.5}\n",
        ideal["ideal_distinct_files_per_batch"]
            .as_f64()
            .unwrap_or(f64::NAN),
        ideal["ideal_same_file_pair_rate"]
            .as_f64()
            .unwrap_or(f64::NAN),
        ideal["ideal_batch_file_entropy_bits"]
            .as_f64()
            .unwrap_or(f64::NAN),
        ideal["ideal_spearman_sd"].as_f64().unwrap_or(f64::NAN),
    );
    println!("{}", HEADER);
    for row in &table {
        println!("{row}");
    }

    if args.output.json.is_some() {
        let value = json!({
            "files": args.files,
            "samples": layout.num_samples(),
            "batch": args.batch,
            "blocks": layout.num_blocks(),
            "row_group_rows": args.row_group_rows,
            "seed": args.seed,
            "epoch": args.epoch,
            "open_blocks": block_config.open_blocks,
            "buffer_samples": block_config.buffer_samples,
            "orders": entries,
        });
        args.output.write(&value)?;
    }
    Ok(())
}

const HEADER: &str = "| order | distinct/batch (x ideal) | first / last window | P_same / P* | entropy bits | r(1) / P* | r(B) / P* | spearman | plan s | plan MB | held blocks / rows |\n|---|---|---|---|---|---|---|---|---|---|---|";

fn table_row(
    name: &str,
    report: &QualityReport,
    plan: &Plan,
    seconds: f64,
    held: &PlanResidency,
) -> String {
    let whole = &report.whole;
    let lag = |index: usize| {
        whole
            .measured
            .lag_same_file_rate
            .get(index)
            .and_then(|lag| lag.rate)
            .map_or(f64::NAN, |rate| rate / whole.ideal.same_file_pair_rate)
    };
    format!(
        "| {name} | {:.1} ({:.2}) | {:.1} / {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:+.4} | {:.3} | {:.1} | {} / {} |",
        whole.measured.distinct_files_per_batch,
        whole.distinct_ratio(),
        report.first_window.measured.distinct_files_per_batch,
        report.last_window.measured.distinct_files_per_batch,
        whole.pair_rate_ratio(),
        whole.measured.batch_file_entropy_bits,
        lag(0),
        lag(1),
        whole.measured.spearman,
        seconds,
        plan.heap_bytes() as f64 / 1e6,
        held.max_blocks,
        held.max_rows,
    )
}
