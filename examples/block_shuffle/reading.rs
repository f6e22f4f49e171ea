//! Reading throughput: sequential and block-shuffle epochs side by side, and naive per-sample
//! random access.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use kiln_ml::core::{BlockLayout, BlockSource, PlanRequest, SampleId, Sampler};
use kiln_ml::data::arrow_array::RecordBatch;
use kiln_ml::data::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use kiln_ml::data::{
    Collate, Loader, LoaderConfig, ParquetSource, RowDecoder, collate_fn, columnar_fn,
    float_matrix, int_vector,
};
use kiln_ml::sampler::quality::{self, QualityOptions};
use kiln_ml::sampler::{BlockShuffleSampler, RandomSampler, SequentialSampler, Sharding};
use rayon::prelude::*;

use kiln_ml_examples::shuffle_dataset::{FEATURES, Row};
use kiln_ml_examples::timing::{CHAIN_EPOCHS, median, run_chain};

/// A collated batch: the `[batch, 16]` feature matrix (row-major) and the rows' labels, as the
/// peers' torch readers deliver them (`benches/peers/readers.py`).
pub type FeaturesAndLabels = (Vec<f32>, Vec<i64>);

/// How the loader turns a batch's rows into its [`FeaturesAndLabels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CollateMode {
    /// Column by column from the decoded Arrow chunks (`columnar_fn` over `ArrowRow`s).
    Columnar,
    /// One `Row` value per sample (a `RowDecoder`), stacked by `collate_fn`.
    PerSample,
}

impl CollateMode {
    /// The name in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Columnar => "columnar",
            Self::PerSample => "per-sample",
        }
    }
}

/// One plan's chains alone (`--only`): a steady workload to profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnlyPlan {
    /// `SequentialSampler`.
    Sequential,
    /// The block shuffle under test.
    BlockShuffle,
}

/// What [`measure`] runs on the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Sequential against block-shuffle chains, the decoder alone and naive random reads.
    Compare,
    /// Rounds of one plan's chains, nothing else.
    Only(OnlyPlan),
}

/// What [`measure`] found.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The figures of [`Job::Compare`].
    Compared(Reading),
    /// For [`Job::Only`]: each round's epochs, in rows per second.
    Epochs(Vec<Vec<f64>>),
}

/// The reading figures, in rows per second unless named otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// Sequential, back-to-back epochs.
    pub sequential_rows_per_s: f64,
    /// Block shuffle, back-to-back epochs.
    pub block_shuffle_rows_per_s: f64,
    /// Sequential, the first epoch of each chain (with its start-up).
    pub sequential_first_epoch_rows_per_s: f64,
    /// Block shuffle, the first epoch of each chain (with its start-up).
    pub block_shuffle_first_epoch_rows_per_s: f64,
    /// Median over rounds of the round's block-shuffle / sequential throughput ratio
    /// (back-to-back epochs): robust to load that drifts between rounds.
    pub block_shuffle_vs_sequential: f64,
    /// The same for the first epoch of each chain.
    pub block_shuffle_vs_sequential_first_epoch: f64,
    /// Median time to build a block-shuffle plan.
    pub block_shuffle_plan_seconds: f64,
    /// Largest `Loader::residency` of the block-shuffle plans, in source samples.
    pub block_shuffle_peak_samples_held: u64,
    /// Naive per-sample random access, extrapolated from `random_timed_reads` reads.
    pub random_rows_per_s: f64,
    /// Naive reads timed.
    pub random_timed_reads: usize,
    /// parquet-rs alone decoding every file on the loader's thread count: the median over
    /// rounds.
    pub raw_decode_rows_per_s: f64,
    /// Median over rounds of the round's sequential (back-to-back) rate / its raw decode rate.
    pub sequential_vs_raw_decode: f64,
    /// The same for the block shuffle.
    pub block_shuffle_vs_raw_decode: f64,
    /// The batch size of the mixing measures: `--batch-size`, at least 2 (the pair measures
    /// need two samples a batch).
    pub quality_batch_size: usize,
    /// Mean distinct files per batch of the first block-shuffle plan (`quality::measure`).
    pub block_shuffle_distinct_files_per_batch: f64,
    /// The same for the sequential plan.
    pub sequential_distinct_files_per_batch: f64,
    /// The same expected of a uniform permutation.
    pub ideal_distinct_files_per_batch: f64,
    /// The loader's prefetch depth for these plans, in batches.
    pub prefetch_batches: usize,
}

/// What the reading measurement needs.
pub struct ReadingSetup<'a, D> {
    /// The Parquet source.
    pub source: &'a Arc<ParquetSource<D>>,
    /// Loader settings.
    pub config: LoaderConfig,
    /// Per-rank sharding (batch size and remainder) for every sampler.
    pub sharding: Sharding,
    /// The block shuffle under test.
    pub shuffle: &'a BlockShuffleSampler,
    /// Samples per batch, for the distinct-files measure.
    pub batch_size: usize,
    /// Rounds of chains.
    pub rounds: u64,
    /// Seed of the plans.
    pub seed: u64,
    /// Naive random reads to time.
    pub random_reads: usize,
    /// The dataset's files (for the raw decode).
    pub paths: &'a [PathBuf],
    /// How the loader collates.
    pub collate: CollateMode,
}

/// Runs rounds of back-to-back sequential epochs and of block-shuffle epochs (the plan that goes
/// first alternates between rounds), each epoch announcing the next so its first reads overlap the end of the previous one; the first epoch
/// of a chain also pays the start-up, later ones show the steady state. Then times naive reads.
/// Or, for [`Job::Only`], only the rounds of that plan's chains.
pub fn measure<D: RowDecoder<Item = Row> + 'static>(
    setup: &ReadingSetup<'_, D>,
    job: Job,
) -> Result<Outcome> {
    match setup.collate {
        CollateMode::PerSample => {
            let stack = collate_fn(|rows: Vec<Row>| -> FeaturesAndLabels {
                let features = rows.iter().flat_map(|row| row.features).collect();
                (features, rows.iter().map(|row| row.label).collect())
            });
            let loader = Loader::with_shared_source(Arc::clone(setup.source), stack, setup.config)?;
            run_job(setup, &loader, job)
        }
        CollateMode::Columnar => {
            // The same files, rows as handles on their decoded chunks.
            let source = ParquetSource::builder().files(setup.paths).build()?;
            let batch = columnar_fn(|columns: RecordBatch| -> FeaturesAndLabels {
                (
                    float_matrix(&columns, &FEATURES).expect("the dataset's 16 feature columns"),
                    int_vector(&columns, "label").expect("the dataset's label column"),
                )
            });
            let loader = Loader::new(source, batch, setup.config)?;
            run_job(setup, &loader, job)
        }
    }
}

fn run_job<D, S, C>(setup: &ReadingSetup<'_, D>, loader: &Loader<S, C>, job: Job) -> Result<Outcome>
where
    D: RowDecoder<Item = Row> + 'static,
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item, Output = FeaturesAndLabels> + 'static,
{
    match job {
        Job::Compare => measure_with(setup, loader).map(Outcome::Compared),
        Job::Only(plan) => one_plan(setup, loader, plan).map(Outcome::Epochs),
    }
}

/// `setup.rounds` chains of `plan`'s epochs, back to back; each epoch's rows per second. The
/// plans are built before each chain, outside its time.
fn one_plan<D, S, C>(
    setup: &ReadingSetup<'_, D>,
    loader: &Loader<S, C>,
    plan: OnlyPlan,
) -> Result<Vec<Vec<f64>>>
where
    D: RowDecoder<Item = Row> + 'static,
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item, Output = FeaturesAndLabels> + 'static,
{
    let source = setup.source.as_ref();
    let rows = source.num_samples() as f64;
    let sequential = SequentialSampler::new(setup.sharding);
    let sampler: &dyn Sampler = match plan {
        OnlyPlan::Sequential => &sequential,
        OnlyPlan::BlockShuffle => setup.shuffle,
    };
    (0..setup.rounds.max(1))
        .map(|round| {
            let plans = (round * CHAIN_EPOCHS..(round + 1) * CHAIN_EPOCHS)
                .map(|epoch| sampler.plan(source, &PlanRequest::new(setup.seed, epoch)))
                .collect::<Result<Vec<_>, _>>()?;
            let seconds = run_chain(loader, plans, "epochs")?;
            Ok(seconds.iter().map(|seconds| rows / seconds).collect())
        })
        .collect()
}

fn measure_with<D, S, C>(setup: &ReadingSetup<'_, D>, loader: &Loader<S, C>) -> Result<Reading>
where
    D: RowDecoder<Item = Row> + 'static,
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item, Output = FeaturesAndLabels> + 'static,
{
    let source = setup.source;
    let rows = source.num_samples() as f64;
    let decoder_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(setup.config.workers)
        .build()?;
    let footers = footers(setup.paths)?;
    let (mut raw_seconds, mut raw_ratios) = (Vec::new(), (Vec::new(), Vec::new()));
    let sequential = SequentialSampler::new(setup.sharding);
    let (mut sequential_first, mut sequential_steady) = (Vec::new(), Vec::new());
    let (mut shuffle_first, mut shuffle_steady) = (Vec::new(), Vec::new());
    let (mut plan_seconds, mut peak_samples_held) = (Vec::new(), 0);
    let (mut round_ratios, mut first_ratios) = (Vec::new(), Vec::new());
    for round in 0..setup.rounds.max(1) {
        let epochs = round * CHAIN_EPOCHS..(round + 1) * CHAIN_EPOCHS;
        let sequential_plans = epochs
            .clone()
            .map(|epoch| sequential.plan(source.as_ref(), &PlanRequest::new(setup.seed, epoch)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut shuffled_plans = Vec::new();
        for epoch in epochs {
            let started = Instant::now();
            let request = PlanRequest::new(setup.seed, epoch);
            let plan = setup.shuffle.plan(source.as_ref(), &request)?;
            plan_seconds.push(started.elapsed().as_secs_f64());
            peak_samples_held = peak_samples_held.max(loader.residency(&plan)?.max_samples());
            shuffled_plans.push(plan);
        }
        let raw = decoder_pool.install(|| raw_decode_seconds(&footers))?;
        raw_seconds.push(raw);
        // The plan that goes first alternates between rounds, so a machine that speeds up or
        // slows down during a round favours neither.
        let (sequential_seconds, seconds) = if round % 2 == 0 {
            let sequential = run_chain(loader, sequential_plans, "sequential epochs")?;
            (
                sequential,
                run_chain(loader, shuffled_plans, "block shuffle epochs")?,
            )
        } else {
            let shuffled = run_chain(loader, shuffled_plans, "block shuffle epochs")?;
            (
                run_chain(loader, sequential_plans, "sequential epochs")?,
                shuffled,
            )
        };
        sequential_first.push(sequential_seconds[0]);
        sequential_steady.extend_from_slice(&sequential_seconds[1..]);
        raw_ratios
            .0
            .push(raw / median(sequential_seconds[1..].to_vec()));
        raw_ratios.1.push(raw / median(seconds[1..].to_vec()));
        shuffle_first.push(seconds[0]);
        shuffle_steady.extend_from_slice(&seconds[1..]);
        round_ratios.push(median(sequential_seconds[1..].to_vec()) / median(seconds[1..].to_vec()));
        first_ratios.push(sequential_seconds[0] / seconds[0]);
    }
    // How mixed the batches are, on the first epoch's plans (what the peers' readers report).
    let first = PlanRequest::new(setup.seed, 0);
    let options = QualityOptions::new(setup.batch_size.max(2));
    let shuffled = setup.shuffle.plan(source.as_ref(), &first)?;
    let shuffled = quality::measure(source.as_ref(), shuffled.order(), &options)?;
    let in_order_plan = sequential.plan(source.as_ref(), &first)?;
    let in_order = quality::measure(source.as_ref(), in_order_plan.order(), &options)?;
    let random = RandomSampler::new(setup.sharding)
        .plan(source.as_ref(), &PlanRequest::new(setup.seed, 0))?;
    let timed = &random.order()[..setup.random_reads.min(random.len()).max(1)];
    let random_seconds = naive_random_reads(source, timed, setup.config.workers)?;
    Ok(Reading {
        sequential_rows_per_s: rows / median(sequential_steady),
        block_shuffle_rows_per_s: rows / median(shuffle_steady),
        sequential_first_epoch_rows_per_s: rows / median(sequential_first),
        block_shuffle_first_epoch_rows_per_s: rows / median(shuffle_first),
        block_shuffle_vs_sequential: median(round_ratios),
        block_shuffle_vs_sequential_first_epoch: median(first_ratios),
        block_shuffle_plan_seconds: median(plan_seconds),
        block_shuffle_peak_samples_held: peak_samples_held,
        random_rows_per_s: timed.len() as f64 / random_seconds,
        random_timed_reads: timed.len(),
        raw_decode_rows_per_s: rows / median(raw_seconds),
        sequential_vs_raw_decode: median(raw_ratios.0),
        block_shuffle_vs_raw_decode: median(raw_ratios.1),
        quality_batch_size: options.batch_size,
        block_shuffle_distinct_files_per_batch: shuffled.whole.measured.distinct_files_per_batch,
        sequential_distinct_files_per_batch: in_order.whole.measured.distinct_files_per_batch,
        ideal_distinct_files_per_batch: shuffled.whole.ideal.distinct_files_per_batch,
        prefetch_batches: loader.prefetch_batches(&in_order_plan),
    })
}

/// Every file's footer, read once: the decoder baseline, like the loader, parses footers before
/// it is timed.
fn footers(paths: &[PathBuf]) -> Result<Vec<(PathBuf, ArrowReaderMetadata)>> {
    paths
        .iter()
        .map(|path| {
            let file = std::fs::File::open(path)?;
            let metadata = ArrowReaderMetadata::load(&file, ArrowReaderOptions::default())?;
            Ok((path.clone(), metadata))
        })
        .collect()
}

/// parquet-rs alone: every row group decoded on its own, in chunks of at most 8,192 rows, as
/// the loader decodes them (from footers read beforehand, as the loader's are), the files
/// spread over the current rayon pool's threads; nothing is batched or kept. Returns the
/// seconds taken.
fn raw_decode_seconds(files: &[(PathBuf, ArrowReaderMetadata)]) -> Result<f64> {
    let started = Instant::now();
    let rows: usize = files
        .par_iter()
        .map(|(path, metadata)| -> Result<usize> {
            let file = std::fs::File::open(path)?;
            let mut rows = 0;
            for group in 0..metadata.metadata().num_row_groups() {
                let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                    file.try_clone()?,
                    metadata.clone(),
                )
                .with_row_groups(vec![group])
                .with_batch_size(8192)
                .build()?;
                for batch in reader {
                    rows += black_box(batch?).num_rows();
                }
            }
            Ok(rows)
        })
        .sum::<Result<usize>>()?;
    black_box(rows);
    Ok(started.elapsed().as_secs_f64())
}

/// Reads each sample the naive way (open, footer, decode its row group, keep one row) on
/// `workers` threads; returns the seconds taken.
fn naive_random_reads<D: RowDecoder<Item = Row>>(
    source: &ParquetSource<D>,
    samples: &[SampleId],
    workers: usize,
) -> Result<f64> {
    let read_one = |sample: SampleId| -> Result<()> {
        let block_index = source
            .block_of(sample)
            .context("sample outside the layout")?;
        let block = source.blocks()[block_index as usize];
        let path = source
            .path_of(block_index)
            .context("block without a file")?;
        let file = std::fs::File::open(path)?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
            .with_row_groups(vec![block.index_in_file as usize])
            .build()?;
        let mut row = (sample - block.first_sample) as usize;
        for batch in reader {
            let batch = batch?;
            if row < batch.num_rows() {
                let mut decoded = Vec::with_capacity(1);
                source
                    .decoder()
                    .decode(&batch.slice(row, 1), &mut decoded)?;
                black_box(decoded);
                return Ok(());
            }
            row -= batch.num_rows();
        }
        bail!("sample {sample} not found in {}", path.display())
    };
    let chunk = samples.len().div_ceil(workers.max(1)).max(1);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = samples
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().try_for_each(|&sample| read_one(sample))))
            .collect();
        threads.into_iter().try_for_each(|thread| {
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("a reader panicked"))?
        })
    })?;
    Ok(started.elapsed().as_secs_f64())
}
