//! The 660-file scenario: block shuffle against sequential and naive random reads, and a
//! preprocessing cache against recomputing a CPU-heavy transform.
//!
//! 1. Writes a seeded synthetic dataset: `--rows` events of 80 bytes (16 float32 features, an
//!    int64 id and an int64 label) over `--files` Snappy Parquet files of uneven size (about
//!    20x between the smallest and the largest), in row groups of at most `--row-group-rows`.
//! 2. Measures full epochs through kiln-data's `Loader` (warm page cache, `--workers` threads).
//!    Sequential and block-shuffle epochs run side by side in `--repeats` rounds of 3
//!    back-to-back epochs each (every epoch announces the next with `Epoch::prefetch_next`);
//!    the figures are the medians of the 2nd and 3rd epochs, and of the 1st for "one epoch with
//!    its start-up":
//!    - sequential: `SequentialSampler`;
//!    - naive per-sample random access: for each sample of a uniform permutation, open its file,
//!      parse the footer, decode its row group and keep one row, as a map-style dataset does. Only
//!      `--random-reads` reads are timed and the rate is extrapolated to the epoch;
//!    - block shuffle: `BlockShuffleSampler` with its default configuration (K = 192 open
//!      blocks, S = 16,384 buffered samples, stratified);
//!    - a CPU-heavy transform standing in for graph construction, cached with `Cached`: a cold
//!      epoch that preprocesses and writes the cache, then cache-hit epochs of the same plan.
//!      Every delivered sample is encoded and hashed in plan order in both, so
//!      `warm_equals_cold` says whether the cached samples are byte-identical to the fresh ones.
//! 3. Compares verified, memory-mapped cache reads with plain reads of the same segment files
//!    from the page cache.
//!
//! Run: `cargo run --release --example block_shuffle -- --files 660 --rows 900000 --json out.json`

use std::convert::Infallible;
use std::hint::black_box;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln::core::{
    BlockLayout, BlockSource, Fingerprint, Plan, PlanRequest, SampleId, Sampler, Transform,
};
use kiln::data::arrow_array::types::{Float32Type, Int64Type};
use kiln::data::arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use kiln::data::parquet::arrow::ArrowWriter;
use kiln::data::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use kiln::data::parquet::basic::Compression;
use kiln::data::parquet::file::properties::WriterProperties;
use kiln::data::{
    BincodeCodec, Cached, Codec, Collate, DecodeError, DiskCache, Loader, LoaderConfig,
    ParquetSource, RowDecoder, collate_fn, decoder_fn, required_values,
};
use kiln::sampler::{
    BlockShuffleConfig, RandomSampler, RemainderPolicy, SequentialSampler, Sharding,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Block shuffle vs sequential vs naive random reads over many Parquet files, and a
/// preprocessing cache vs recomputation.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Number of Parquet files.
    #[arg(long, default_value_t = 660)]
    files: u32,
    /// Total rows (events) over all files.
    #[arg(long, default_value_t = 900_000)]
    rows: u64,
    /// Largest row group; each file is cut into row groups of at most this many rows.
    #[arg(long, default_value_t = 1024)]
    row_group_rows: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch_size: u64,
    /// Loader worker threads (default: the available parallelism, at most 8).
    #[arg(long)]
    workers: Option<usize>,
    /// Batches the loader assembles ahead of the consumer.
    #[arg(long, default_value_t = 8)]
    prefetch_batches: usize,
    /// Seed of the dataset and of the samplers.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Naive random reads timed (the epoch rate is extrapolated from them).
    #[arg(long, default_value_t = 2000)]
    random_reads: usize,
    /// Smoothing rounds of the stand-in graph construction (its CPU cost per sample).
    #[arg(long, default_value_t = 128)]
    graph_rounds: u32,
    /// Rounds of back-to-back sequential and block-shuffle epochs, and cache-hit epochs;
    /// medians are reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Write the dataset here instead of a temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the figures as one JSON object to this path.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One decoded event.
#[derive(Debug, Clone, Copy)]
struct Row {
    id: i64,
    label: i64,
    features: [f32; 16],
}

/// The graph built from an event: 8 nodes, k-nearest-neighbour edges with weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Graph {
    id: i64,
    label: i64,
    nodes: Vec<[f32; 2]>,
    edges: Vec<[u8; 2]>,
    weights: Vec<f32>,
}

/// Stands in for graph construction: the 16 features as 8 points, `rounds` of Gaussian-kernel
/// smoothing over the dense graph, then each node's `neighbours` nearest nodes as edges.
#[derive(Debug, Clone, Copy)]
struct BuildGraph {
    rounds: u32,
    neighbours: usize,
}

impl Transform<Row> for BuildGraph {
    type Output = Graph;
    type Error = Infallible;

    fn apply(&self, row: Row) -> Result<Graph, Infallible> {
        let original: [[f32; 2]; 8] =
            std::array::from_fn(|i| [row.features[2 * i], row.features[2 * i + 1]]);
        let mut nodes = original;
        for _ in 0..self.rounds {
            let mut next = [[0.0f32; 2]; 8];
            for (i, out) in next.iter_mut().enumerate() {
                let (mut total, mut sum) = (0.0f32, [0.0f32; 2]);
                for node in &nodes {
                    let (dx, dy) = (nodes[i][0] - node[0], nodes[i][1] - node[1]);
                    let weight = (-(dx * dx + dy * dy)).exp();
                    total += weight;
                    sum[0] += weight * node[0];
                    sum[1] += weight * node[1];
                }
                *out = [
                    0.5 * original[i][0] + 0.5 * sum[0] / total,
                    0.5 * original[i][1] + 0.5 * sum[1] / total,
                ];
            }
            nodes = next;
        }
        let (mut edges, mut weights) = (Vec::new(), Vec::new());
        for i in 0..8 {
            let mut others: Vec<(f32, usize)> = (0..8)
                .filter(|&j| j != i)
                .map(|j| {
                    let (dx, dy) = (nodes[i][0] - nodes[j][0], nodes[i][1] - nodes[j][1]);
                    (dx * dx + dy * dy, j)
                })
                .collect();
            others.sort_by(|a, b| a.0.total_cmp(&b.0));
            for &(distance, j) in others.iter().take(self.neighbours) {
                edges.push([i as u8, j as u8]);
                weights.push((-distance).exp());
            }
        }
        Ok(Graph {
            id: row.id,
            label: row.label,
            nodes: nodes.to_vec(),
            edges,
            weights,
        })
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder()
            .str("build-graph")
            .u64(1)
            .u64(u64::from(self.rounds))
            .u64(self.neighbours as u64)
            .finish()
    }
}

/// The decoder of the synthetic schema.
fn row_decoder() -> impl RowDecoder<Item = Row> + Clone {
    decoder_fn("event-row", 1, |batch: &RecordBatch| {
        let ids = required_values::<Int64Type>(batch, "id")?;
        let labels = required_values::<Int64Type>(batch, "label")?;
        let columns = (0..16)
            .map(|i| required_values::<Float32Type>(batch, &format!("f{i}")))
            .collect::<Result<Vec<_>, DecodeError>>()?;
        Ok((0..batch.num_rows())
            .map(|row| Row {
                id: ids[row],
                label: labels[row],
                features: std::array::from_fn(|i| columns[i][row]),
            })
            .collect())
    })
}

fn progress(len: u64, message: &'static str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target).with_message(message);
    if let Ok(style) = ProgressStyle::with_template("{msg:>28} {wide_bar} {pos}/{len} ({eta})") {
        bar.set_style(style);
    }
    bar
}

/// Splits `rows` into `files` uneven sizes (log-uniform weights spanning about 20x).
fn file_sizes(files: u32, rows: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let weights: Vec<f64> = (0..files)
        .map(|_| rng.random_range(0.0f64..3.0).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|weight| (weight / total * rows as f64).floor().max(1.0) as u64)
        .collect();
    let mut assigned: u64 = sizes.iter().sum();
    let mut index = 0;
    while assigned != rows {
        let slot = &mut sizes[index % files as usize];
        if assigned < rows {
            *slot += 1;
            assigned += 1;
        } else if *slot > 1 {
            *slot -= 1;
            assigned -= 1;
        }
        index += 1;
    }
    sizes
}

/// Writes the dataset; returns the file paths and their total size in bytes.
fn write_dataset(args: &Args, dir: &Path) -> Result<(Vec<PathBuf>, u64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let sizes = file_sizes(args.files, args.rows, &mut rng);
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(args.row_group_rows))
        .build();
    let bar = progress(u64::from(args.files), "writing Parquet files");
    let (mut paths, mut bytes, mut next_id) = (Vec::new(), 0, 0i64);
    for (index, &rows) in sizes.iter().enumerate() {
        let rows = rows as usize;
        let mut columns: Vec<(String, ArrayRef)> = vec![(
            "id".to_owned(),
            Arc::new(Int64Array::from_iter_values(next_id..next_id + rows as i64)),
        )];
        next_id += rows as i64;
        for feature in 0..16 {
            let values = (0..rows).map(|_| rng.random_range(-2.0f32..2.0));
            let array = Float32Array::from_iter_values(values);
            columns.push((format!("f{feature}"), Arc::new(array)));
        }
        let labels = (0..rows).map(|_| rng.random_range(0..10i64));
        columns.push((
            "label".to_owned(),
            Arc::new(Int64Array::from_iter_values(labels)),
        ));
        let batch = RecordBatch::try_from_iter(columns)?;
        let path = dir.join(format!("part-{index:05}.parquet"));
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties.clone()))?;
        writer.write(&batch)?;
        writer.close()?;
        bytes += std::fs::metadata(&path)?.len();
        paths.push(path);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((paths, bytes))
}

/// Runs one epoch of `plan`, passing every batch to `consume`; returns the seconds taken.
fn run_epoch<S, C>(
    loader: &Loader<S, C>,
    plan: Plan,
    message: &'static str,
    mut consume: impl FnMut(C::Output),
) -> Result<f64>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    let batches = plan.len().div_ceil(plan.batch_size() as usize) as u64;
    let bar = progress(batches, message);
    let started = Instant::now();
    for batch in loader.epoch(plan)? {
        consume(batch?);
        bar.inc(1);
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(seconds)
}

/// Epochs per chain of back-to-back epochs.
const CHAIN_EPOCHS: u64 = 3;

/// Runs plans back to back, each epoch announcing the next (`Epoch::prefetch_next`); returns
/// the seconds of each epoch, from the end of the previous one (the first from its start).
fn run_chain<S, C>(
    loader: &Loader<S, C>,
    plans: Vec<Plan>,
    message: &'static str,
) -> Result<Vec<f64>>
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
    C: Collate<S::Item> + 'static,
    C::Output: 'static,
{
    let batches = plans
        .iter()
        .map(|plan| plan.len().div_ceil(plan.batch_size() as usize) as u64)
        .sum();
    let bar = progress(batches, message);
    let mut plans = plans.into_iter();
    let mut seconds = Vec::new();
    let mut started = Instant::now();
    let mut epoch = loader.epoch(plans.next().context("an empty chain")?)?;
    loop {
        if let Some(next) = plans.next() {
            epoch.prefetch_next(next);
        }
        for batch in &mut epoch {
            black_box(batch?);
            bar.inc(1);
        }
        seconds.push(started.elapsed().as_secs_f64());
        started = Instant::now();
        match epoch.into_next() {
            Some(next) => epoch = next?,
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok(seconds)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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

/// Hashes a batch of graphs as the cache encodes them, so epochs can be compared byte for byte.
fn digest_collate() -> impl Collate<Graph, Output = (usize, Fingerprint)> {
    collate_fn(|graphs: Vec<Graph>| {
        let mut bytes = Vec::new();
        for graph in &graphs {
            BincodeCodec
                .encode(graph, &mut bytes)
                .expect("a graph always encodes");
        }
        (graphs.len(), Fingerprint::of_bytes(&bytes))
    })
}

/// Times plain page-cache reads of the segment files against verified cache reads of the same
/// bytes (best of `repeats`); returns (bytes, page-cache bytes/s, cache bytes/s).
fn page_cache_comparison<S, T, C>(
    cached: &Cached<S, T, C>,
    repeats: usize,
) -> Result<(u64, f64, f64)>
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
    let (mut page_seconds, mut cache_seconds) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        for path in &paths {
            black_box(std::fs::read(path)?);
        }
        page_seconds = page_seconds.min(started.elapsed().as_secs_f64());
        let started = Instant::now();
        for key in &keys {
            let segment = cached.disk().get(key)?.context("a segment vanished")?;
            black_box(segment.byte_len());
        }
        cache_seconds = cache_seconds.min(started.elapsed().as_secs_f64());
    }
    Ok((
        bytes,
        bytes as f64 / page_seconds,
        bytes as f64 / cache_seconds,
    ))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.files == 0 || args.rows < u64::from(args.files) || args.batch_size == 0 {
        bail!("need at least one file, one row per file and a batch size of at least 1");
    }
    let workers = args
        .workers
        .unwrap_or_else(|| LoaderConfig::default().workers);
    let config = LoaderConfig::new()
        .with_workers(workers)
        .with_prefetch_batches(args.prefetch_batches);
    let temp_data = tempfile::tempdir()?;
    let data_dir = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => temp_data.path().to_owned(),
    };

    let started = Instant::now();
    let (paths, dataset_bytes) = write_dataset(&args, &data_dir)?;
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
    let rows = source.num_samples() as f64;
    let sharding = Sharding::new(args.batch_size, RemainderPolicy::Uneven);
    let stack = collate_fn(|rows: Vec<Row>| {
        rows.iter()
            .flat_map(|row| row.features)
            .collect::<Vec<f32>>()
    });
    let loader = Loader::with_shared_source(Arc::clone(&source), stack, config)?;

    // Sequential and block shuffle, side by side: rounds of back-to-back epochs of each, every
    // epoch announcing the next so its first reads overlap the end of the previous one. The
    // first epoch of a chain also pays the start-up (reading the blocks its first batches
    // need); later epochs show the steady state.
    let sequential = SequentialSampler::new(sharding);
    let shuffle = BlockShuffleConfig::default()
        .with_batch_size(args.batch_size)
        .with_remainder(RemainderPolicy::Uneven)
        .init()?;
    let (mut sequential_first, mut sequential_steady) = (Vec::new(), Vec::new());
    let (mut shuffle_first, mut shuffle_steady) = (Vec::new(), Vec::new());
    let (mut plan_seconds, mut peak_samples_held) = (Vec::new(), 0);
    for round in 0..args.repeats.max(1) as u64 {
        let epochs = round * CHAIN_EPOCHS..(round + 1) * CHAIN_EPOCHS;
        let plans = epochs
            .clone()
            .map(|epoch| sequential.plan(source.as_ref(), &PlanRequest::new(args.seed, epoch)))
            .collect::<Result<Vec<_>, _>>()?;
        let seconds = run_chain(&loader, plans, "sequential epochs")?;
        sequential_first.push(seconds[0]);
        sequential_steady.extend_from_slice(&seconds[1..]);
        let mut plans = Vec::new();
        for epoch in epochs {
            let started = Instant::now();
            let plan = shuffle.plan(source.as_ref(), &PlanRequest::new(args.seed, epoch))?;
            plan_seconds.push(started.elapsed().as_secs_f64());
            peak_samples_held = peak_samples_held.max(loader.memory_bound(&plan).max_samples());
            plans.push(plan);
        }
        let seconds = run_chain(&loader, plans, "block shuffle epochs")?;
        shuffle_first.push(seconds[0]);
        shuffle_steady.extend_from_slice(&seconds[1..]);
    }
    let sequential_rows_per_s = rows / median(sequential_steady);
    let block_shuffle_rows_per_s = rows / median(shuffle_steady);
    let sequential_first_epoch_rows_per_s = rows / median(sequential_first);
    let block_shuffle_first_epoch_rows_per_s = rows / median(shuffle_first);
    let block_shuffle_plan_seconds = median(plan_seconds);

    // Naive per-sample random access, timed on a sample of reads and extrapolated.
    let random =
        RandomSampler::new(sharding).plan(source.as_ref(), &PlanRequest::new(args.seed, 0))?;
    let timed = &random.order()[..args.random_reads.min(random.len()).max(1)];
    let random_seconds = naive_random_reads(&source, timed, workers)?;
    let random_rows_per_s = timed.len() as f64 / random_seconds;

    // CPU-heavy preprocessing: a cold epoch that builds the cache, then cache hits.
    let cache_dir = tempfile::tempdir()?;
    let transform = BuildGraph {
        rounds: args.graph_rounds,
        neighbours: 3,
    };
    let cached_source = ParquetSource::builder()
        .files(&paths)
        .build_with(row_decoder())?;
    // The transform's own cost, on one core, from the first blocks' rows.
    let mut sample_rows = Vec::new();
    for block in 0..cached_source.num_blocks() as u32 {
        if sample_rows.len() >= 2000 {
            break;
        }
        sample_rows.extend(cached_source.read_block(block)?);
    }
    let started = Instant::now();
    for row in &sample_rows {
        black_box(transform.apply(*row)?);
    }
    let graph_microseconds_per_sample =
        started.elapsed().as_secs_f64() * 1e6 / sample_rows.len().max(1) as f64;
    let cached = Arc::new(Cached::new(
        cached_source,
        transform,
        DiskCache::open(cache_dir.path())?,
    ));
    let graph_loader = Loader::with_shared_source(Arc::clone(&cached), digest_collate(), config)?;
    let plan = shuffle.plan(cached.as_ref(), &PlanRequest::new(args.seed, 0))?;
    let digest_epoch = |message: &'static str| -> Result<(f64, Fingerprint, usize)> {
        let (mut digest, mut samples) = (Fingerprint::builder(), 0);
        let seconds = run_epoch(&graph_loader, plan.clone(), message, |(count, batch)| {
            samples += count;
            digest = std::mem::take(&mut digest).fingerprint(batch);
        })?;
        Ok((seconds, digest.finish(), samples))
    };
    let (cold_seconds, cold_digest, cold_samples) = digest_epoch("cold preprocessing epoch")?;
    let cold_stats = cached.stats();
    let mut seconds = Vec::new();
    let mut warm_equals_cold = true;
    for _ in 0..args.repeats.max(1) {
        let (epoch_seconds, digest, samples) = digest_epoch("cache-hit epoch")?;
        warm_equals_cold &= digest == cold_digest && samples == cold_samples;
        seconds.push(epoch_seconds);
    }
    let cold_preprocess_rows_per_s = rows / cold_seconds;
    let cached_rows_per_s = rows / median(seconds);
    let stats = cached.stats();
    let (cache_bytes, page_cache_bytes_per_s, cache_read_bytes_per_s) =
        page_cache_comparison(&cached, args.repeats)?;

    let ratio = |a: f64, b: f64| a / b;
    println!();
    println!(
        "workers: {workers}, batch size {}, prefetch {} batches, warm page cache",
        args.batch_size, args.prefetch_batches
    );
    println!("{:<44} {:>14}", "epoch", "rows/s");
    println!(
        "{:<44} {:>14.0}",
        "sequential (back-to-back epochs)", sequential_rows_per_s
    );
    println!(
        "{:<44} {:>14.0}",
        format!("naive random (extrapolated from {} reads)", timed.len()),
        random_rows_per_s
    );
    println!(
        "{:<44} {:>14.0}",
        "block shuffle, default config (back-to-back)", block_shuffle_rows_per_s
    );
    println!(
        "{:<44} {:>14.0}",
        "sequential, one epoch with its start-up", sequential_first_epoch_rows_per_s
    );
    println!(
        "{:<44} {:>14.0}",
        "block shuffle, one epoch with its start-up", block_shuffle_first_epoch_rows_per_s
    );
    println!(
        "{:<44} {:>14.0}",
        format!("cold: graph ({graph_microseconds_per_sample:.0} us/sample) + cache write"),
        cold_preprocess_rows_per_s
    );
    println!("{:<44} {:>14.0}", "cache hits", cached_rows_per_s);
    println!();
    println!(
        "block shuffle: {:.2}x sequential, {:.0}x naive random; plan built in {:.3} s; \
         loader holds at most {} samples",
        ratio(block_shuffle_rows_per_s, sequential_rows_per_s),
        ratio(block_shuffle_rows_per_s, random_rows_per_s),
        block_shuffle_plan_seconds,
        peak_samples_held
    );
    println!(
        "cache: {:.1}x the cold epoch; {:.1} MB in {} segments; cold epoch {} misses, then {} disk hits; \
         cached samples byte-identical to fresh ones: {warm_equals_cold}",
        ratio(cached_rows_per_s, cold_preprocess_rows_per_s),
        cache_bytes as f64 / 1e6,
        cached.num_blocks(),
        cold_stats.misses,
        stats.disk_hits
    );
    println!(
        "verified cache reads {:.2} GB/s vs plain page-cache reads {:.2} GB/s of the same files: {:.2}x",
        cache_read_bytes_per_s / 1e9,
        page_cache_bytes_per_s / 1e9,
        ratio(cache_read_bytes_per_s, page_cache_bytes_per_s)
    );

    if let Some(path) = &args.json {
        let figures = serde_json::json!({
            "files": args.files,
            "rows": args.rows,
            "row_group_rows": args.row_group_rows,
            "blocks": source.num_blocks(),
            "batch_size": args.batch_size,
            "workers": workers,
            "prefetch_batches": args.prefetch_batches,
            "seed": args.seed,
            "dataset_bytes": dataset_bytes,
            "sequential_rows_per_s": sequential_rows_per_s,
            "random_rows_per_s": random_rows_per_s,
            "random_timed_reads": timed.len(),
            "random_rows_per_s_is_extrapolated": true,
            "block_shuffle_rows_per_s": block_shuffle_rows_per_s,
            "block_shuffle_vs_sequential": ratio(block_shuffle_rows_per_s, sequential_rows_per_s),
            "sequential_first_epoch_rows_per_s": sequential_first_epoch_rows_per_s,
            "block_shuffle_first_epoch_rows_per_s": block_shuffle_first_epoch_rows_per_s,
            "block_shuffle_vs_sequential_first_epoch": ratio(
                block_shuffle_first_epoch_rows_per_s,
                sequential_first_epoch_rows_per_s
            ),
            "block_shuffle_vs_random": ratio(block_shuffle_rows_per_s, random_rows_per_s),
            "block_shuffle_plan_seconds": block_shuffle_plan_seconds,
            "block_shuffle_peak_samples_held": peak_samples_held,
            "graph_rounds": args.graph_rounds,
            "graph_microseconds_per_sample": graph_microseconds_per_sample,
            "cold_preprocess_rows_per_s": cold_preprocess_rows_per_s,
            "cached_rows_per_s": cached_rows_per_s,
            "cached_vs_cold": ratio(cached_rows_per_s, cold_preprocess_rows_per_s),
            "warm_equals_cold": warm_equals_cold,
            "cache_bytes": cache_bytes,
            "page_cache_bytes_per_s": page_cache_bytes_per_s,
            "cache_read_bytes_per_s": cache_read_bytes_per_s,
            "cache_vs_page_cache_ratio": ratio(cache_read_bytes_per_s, page_cache_bytes_per_s),
            "repeats": args.repeats,
        });
        std::fs::write(path, serde_json::to_string_pretty(&figures)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
