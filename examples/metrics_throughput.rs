//! Trajectory metrics throughput: the Argoverse 2 preset on seeded synthetic forecasts, measured
//! on the host path (one thread and the chosen thread count) and on the Burn tensor path.
//!
//! `--joint A` scores every A consecutive agents as one joint prediction (av2's multi-agent
//! setting: the world with the lowest mean FDE, the actor miss rate); `--trajectory-types`
//! classifies each ground truth into Waymo's trajectory types, which adds mAP and soft mAP.
//!
//! The data: N agents driving for T steps at 10 Hz with random speed, acceleration and turn
//! rate; K forecasts per agent that guess the speed and turn rate with some error; mode
//! probabilities that favor the better guesses. `--dump DIR` writes the exact data as raw
//! little-endian `f32` files with a `meta.json`, so `benches/peers/metrics_av2.sh` can compute
//! the same numbers with `av2` and numpy.
//!
//! Run: `cargo run --release --example metrics_throughput -- --n 100000 --k 6 --t 60 --json out.json`

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, ensure};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kiln_ml::backend::BackendTask;
use kiln_ml::core::Metric;
use kiln_ml::metrics::{
    BatchShape, MetricReport, MetricsConfig, Parallelism, TensorTrajectoryBatch, TrackState,
    TrajectoryBatch, TrajectoryType,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Measure kiln-ml-metrics' host and tensor paths on seeded synthetic trajectories.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of agents, N.
    #[arg(long, default_value_t = 100_000, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    n: usize,
    /// Forecasts per agent, K.
    #[arg(long, default_value_t = 6, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    k: usize,
    /// Future steps per trajectory, T (10 Hz).
    #[arg(long, default_value_t = 60, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    t: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Host threads for the main host measurement (0: all cores). One thread is always measured too.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Agents per tensor batch (a validation batch).
    #[arg(long, default_value_t = 4096, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    batch: usize,
    /// Timed repetitions of each path; the fastest counts.
    #[arg(long, default_value_t = 3, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    repeats: usize,
    #[command(flatten)]
    device: kiln_ml_examples::cli::CpuDeviceChoice,
    /// Skip the tensor path.
    #[arg(long)]
    no_tensor: bool,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
    /// Write the generated data (raw little-endian f32 and meta.json) into this directory.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// Agents per joint prediction: every A consecutive agents form one scene whose worlds
    /// share one probability (the mean of the agents' rows). N and --batch must be multiples.
    #[arg(long, default_value_t = 1)]
    joint: usize,
    /// Classify each ground truth into Waymo's trajectory types and report mAP and soft mAP
    /// (host path only).
    #[arg(long)]
    trajectory_types: bool,
}

/// The synthetic batch: predictions [N, K, T, 2], ground truth [N, T, 2], probabilities
/// [N / A, K] (one row per joint prediction) and each ground truth's trajectory type.
struct Data {
    predictions: Vec<f32>,
    ground_truth: Vec<f32>,
    probabilities: Vec<f32>,
    trajectory_types: Vec<Option<TrajectoryType>>,
}

impl Args {
    /// The Argoverse 2 preset with `--joint` agents per prediction.
    fn config(&self) -> MetricsConfig {
        let mut config = MetricsConfig::argoverse2();
        config.agents_per_prediction = self.joint;
        config
    }
}

const STEP_SECONDS: f32 = 0.1;

/// Rolls a constant-turn-rate, constant-acceleration motion out for `steps` steps from the
/// origin; returns the final speed and heading.
fn roll_out(
    out: &mut [f32],
    speed_mps: f32,
    heading: f32,
    turn_rate: f32,
    accel: f32,
) -> (f32, f32) {
    let (mut x, mut y, mut speed, mut heading) = (0.0f32, 0.0f32, speed_mps, heading);
    for point in out.chunks_exact_mut(2) {
        speed = (speed + accel * STEP_SECONDS).max(0.0);
        heading += turn_rate * STEP_SECONDS;
        x += speed * STEP_SECONDS * heading.cos();
        y += speed * STEP_SECONDS * heading.sin();
        point[0] = x;
        point[1] = y;
    }
    (speed, heading)
}

/// A state at `(x, y)` moving at `speed` along `heading`.
fn state(x: f32, y: f32, speed: f32, heading: f32) -> TrackState {
    TrackState {
        x,
        y,
        heading,
        velocity_x: speed * heading.cos(),
        velocity_y: speed * heading.sin(),
    }
}

fn generate(args: &Args, progress: &ProgressBar) -> Data {
    let (n, k, t) = (args.n, args.k, args.t);
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut data = Data {
        predictions: vec![0.0; n * k * t * 2],
        ground_truth: vec![0.0; n * t * 2],
        probabilities: vec![0.0; n * k],
        trajectory_types: Vec::new(),
    };
    let mut logits = vec![0.0f32; k];
    for agent in 0..n {
        let speed = rng.random_range(0.0f32..15.0);
        let heading = rng.random_range(-std::f32::consts::PI..std::f32::consts::PI);
        let turn_rate = rng.random_range(-0.3f32..0.3);
        let accel = rng.random_range(-1.0f32..1.0);
        let truth = &mut data.ground_truth[agent * t * 2..][..t * 2];
        let (end_speed, end_heading) = roll_out(truth, speed, heading, turn_rate, accel);
        if args.trajectory_types {
            let end = state(truth[t * 2 - 2], truth[t * 2 - 1], end_speed, end_heading);
            let start = state(0.0, 0.0, speed, heading);
            data.trajectory_types
                .push(Some(TrajectoryType::classify(start, end)));
        }
        for (mode, logit) in logits.iter_mut().enumerate() {
            let speed_error = rng.random_range(-0.05f32..0.05);
            let turn_error = rng.random_range(-0.015f32..0.015);
            let accel_error = rng.random_range(-0.2f32..0.2);
            let out = &mut data.predictions[(agent * k + mode) * t * 2..][..t * 2];
            roll_out(
                out,
                speed * (1.0 + speed_error),
                heading,
                turn_rate + turn_error,
                accel + accel_error,
            );
            *logit =
                -(speed_error.abs() * 20.0 + turn_error.abs() * 60.0 + accel_error.abs() * 5.0)
                    + rng.random_range(-0.5f32..0.5);
        }
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let total: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        for (p, l) in data.probabilities[agent * k..][..k].iter_mut().zip(&logits) {
            *p = (l - max).exp() / total;
        }
        if agent % 4096 == 0 {
            progress.set_position(agent as u64);
        }
    }
    if args.joint > 1 {
        // One row per scene: the mean of its agents' rows (still summing to 1).
        let rows: Vec<f32> = data
            .probabilities
            .chunks_exact(k * args.joint)
            .flat_map(|scene| {
                (0..k).map(move |mode| {
                    let total: f32 = scene.chunks_exact(k).map(|row| row[mode]).sum();
                    total / args.joint as f32
                })
            })
            .collect();
        data.probabilities = rows;
    }
    progress.finish_and_clear();
    data
}

/// Times `repeats` host passes over all agents in one batch; returns the best seconds and the report.
fn host_pass(args: &Args, data: &Data, threads: usize) -> anyhow::Result<(f64, MetricReport)> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let parallelism = if threads == 1 {
        Parallelism::Sequential
    } else {
        Parallelism::Rayon {
            min_units_per_task: 1024,
        }
    };
    let shape = BatchShape::new(args.n, args.k, args.t);
    let mut best = f64::INFINITY;
    let mut report = None;
    for _ in 0..args.repeats.max(1) {
        let mut metrics = args.config().init()?.with_parallelism(parallelism);
        let started = Instant::now();
        // Validation is part of the measured work: a real update checks its inputs.
        let mut batch = TrajectoryBatch::new(shape, &data.predictions, &data.ground_truth)?
            .with_probabilities(&data.probabilities)?;
        if args.trajectory_types {
            batch = batch.with_trajectory_types(&data.trajectory_types)?;
        }
        pool.install(|| metrics.update(&batch))?;
        // So is the report: mAP sorts its samples there.
        report = Some(metrics.compute());
        best = best.min(started.elapsed().as_secs_f64());
    }
    Ok((best, report.context("no host pass ran")?))
}

/// The tensor path on the selected device: batches uploaded first, then the timed updates.
struct TensorPass<'a> {
    args: &'a Args,
    data: &'a Data,
}

impl BackendTask for TensorPass<'_> {
    type Output = anyhow::Result<(f64, f64, MetricReport)>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> Self::Output {
        // No gradients are needed: measure on the inner backend, on the same device.
        measure_tensor::<B::InnerBackend>(self.args, self.data, &device)
    }
}

fn measure_tensor<B: Backend>(
    args: &Args,
    data: &Data,
    device: &B::Device,
) -> anyhow::Result<(f64, f64, MetricReport)> {
    let (k, t) = (args.k, args.t);
    let upload_started = Instant::now();
    let mut batches = Vec::new();
    for start in (0..args.n).step_by(args.batch) {
        let count = args.batch.min(args.n - start);
        let slice = |values: &[f32], per_agent: usize| {
            values[start * per_agent..(start + count) * per_agent].to_vec()
        };
        let predictions = Tensor::<B, 4>::from_data(
            TensorData::new(slice(&data.predictions, k * t * 2), [count, k, t, 2]),
            device,
        );
        let truth = Tensor::<B, 3>::from_data(
            TensorData::new(slice(&data.ground_truth, t * 2), [count, t, 2]),
            device,
        );
        let scenes = count / args.joint;
        let rows = &data.probabilities[start / args.joint * k..][..scenes * k];
        let p = Tensor::<B, 2>::from_data(TensorData::new(rows.to_vec(), [scenes, k]), device);
        batches.push(TensorTrajectoryBatch::new(predictions, truth)?.with_probabilities(p)?);
    }
    let upload_seconds = upload_started.elapsed().as_secs_f64();
    let progress = progress_bar((batches.len() * args.repeats.max(1)) as u64, "tensor path");
    let mut best = f64::INFINITY;
    let mut report = None;
    for _ in 0..args.repeats.max(1) {
        let mut metrics = args.config().init()?;
        let started = Instant::now();
        for batch in &batches {
            metrics.update(batch)?;
            progress.inc(1);
        }
        best = best.min(started.elapsed().as_secs_f64());
        report = Some(metrics.compute());
    }
    progress.finish_and_clear();
    Ok((best, upload_seconds, report.context("no tensor pass ran")?))
}

/// A progress bar on standard error (indicatif hides it when that is not a terminal).
fn progress_bar(length: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(length).with_message(message);
    if let Ok(style) = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} {elapsed}") {
        bar.set_style(style);
    }
    bar
}

/// Writes `bytes` to `path` atomically and durably (kiln-ml-core's rule for results).
fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    Ok(kiln_ml::core::write_atomic(
        path,
        bytes,
        kiln_ml::core::Durability::Synced,
    )?)
}

fn dump(dir: &Path, args: &Args, data: &Data) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = [
        (
            "predictions.f32",
            &data.predictions,
            vec![args.n, args.k, args.t, 2],
        ),
        (
            "ground_truth.f32",
            &data.ground_truth,
            vec![args.n, args.t, 2],
        ),
        (
            "probabilities.f32",
            &data.probabilities,
            vec![args.n / args.joint, args.k],
        ),
    ];
    // Waymo's type codes, -1 where there is none.
    let codes: Vec<f32> = data
        .trajectory_types
        .iter()
        .map(|kind| kind.map_or(-1.0, |kind| kind as u8 as f32))
        .collect();
    let mut files = files.to_vec();
    if args.trajectory_types {
        files.push(("trajectory_types.f32", &codes, vec![args.n]));
    }
    let mut meta = serde_json::Map::new();
    for (name, values, shape) in &files {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        write_atomic(&dir.join(name), &bytes)?;
        meta.insert(
            name.to_string(),
            serde_json::json!({ "dtype": "<f4", "shape": shape }),
        );
    }
    meta.insert("seed".into(), args.seed.into());
    meta.insert("agents_per_prediction".into(), args.joint.into());
    write_atomic(
        &dir.join("meta.json"),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
    )
}

/// The largest relative difference between two reports' values.
fn max_relative_difference(a: &MetricReport, b: &MetricReport) -> f64 {
    let values = |r: &MetricReport| -> Vec<Option<f64>> {
        r.horizons
            .iter()
            .flat_map(|h| {
                let mut v = vec![h.ade, h.fde];
                for e in &h.top_k {
                    v.extend([
                        e.min_ade,
                        e.min_fde,
                        e.miss_rate,
                        e.brier_min_ade,
                        e.brier_min_fde,
                        e.p_min_ade,
                        e.p_min_fde,
                        e.p_miss_rate,
                        e.actor_miss_rate,
                    ]);
                }
                v
            })
            .collect()
    };
    kiln_ml_examples::compare::worst(values(a).into_iter().zip(values(b)).map(|(x, y)| {
        match (x, y) {
            (Some(x), Some(y)) => (x - y).abs() / x.abs().max(y.abs()).max(1e-12),
            (None, None) => 0.0,
            _ => f64::INFINITY,
        }
    }))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.n > 0 && args.k > 0 && args.t > 0,
        "--n, --k and --t must be at least 1"
    );
    ensure!(args.batch > 0, "--batch must be at least 1");
    ensure!(
        args.joint > 0 && args.n % args.joint == 0 && args.batch % args.joint == 0,
        "--joint must be at least 1 and divide --n ({}) and --batch ({})",
        args.n,
        args.batch
    );
    // Before the host pass: a device that cannot be used fails now, not after it.
    let selection = (!args.no_tensor)
        .then(|| args.device.select())
        .transpose()?;
    let threads = if args.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        args.threads
    };

    let started = Instant::now();
    let data = generate(&args, &progress_bar(args.n as u64, "generating"));
    let generate_seconds = started.elapsed().as_secs_f64();
    if let Some(dir) = &args.dump {
        dump(dir, &args, &data)?;
    }

    let (one_thread_seconds, host_report) = host_pass(&args, &data, 1)?;
    let (host_seconds, threaded_report) = if threads == 1 {
        (one_thread_seconds, host_report.clone())
    } else {
        host_pass(&args, &data, threads)?
    };
    let agents = args.n as f64;
    let at = |report: &MetricReport, k: usize| report.at(k).copied();
    let k6 = at(&host_report, 6).context("K = 6 missing")?;
    let k1 = at(&host_report, 1).context("K = 1 missing")?;

    let mut figures = serde_json::json!({
        "n": args.n, "k": args.k, "t": args.t, "seed": args.seed,
        "preset": "argoverse2",
        "agents_per_prediction": args.joint,
        "trajectory_types": args.trajectory_types,
        "generate_seconds": generate_seconds,
        "host_threads": threads,
        "host_seconds": host_seconds,
        "host_agents_per_s": agents / host_seconds,
        "host_one_thread_seconds": one_thread_seconds,
        "host_one_thread_agents_per_s": agents / one_thread_seconds,
        "host_thread_speedup": one_thread_seconds / host_seconds,
        "host_threads_max_relative_difference": max_relative_difference(&host_report, &threaded_report),
        "min_ade": k6.min_ade, "min_fde": k6.min_fde, "miss_rate": k6.miss_rate,
        "brier_min_ade": k6.brier_min_ade, "brier_min_fde": k6.brier_min_fde,
        "p_min_ade": k6.p_min_ade, "p_min_fde": k6.p_min_fde, "p_miss_rate": k6.p_miss_rate,
        "min_ade_k1": k1.min_ade, "min_fde_k1": k1.min_fde, "miss_rate_k1": k1.miss_rate,
        "ade": host_report.horizons[0].ade, "fde": host_report.horizons[0].fde,
        "actor_miss_rate": k6.actor_miss_rate,
        "mean_average_precision": k6.mean_average_precision,
        "soft_mean_average_precision": k6.soft_mean_average_precision,
        "mean_average_precision_k1": k1.mean_average_precision,
    });
    println!(
        "kiln metrics throughput: argoverse2 preset, N = {}, K = {}, T = {}, {} agent(s) per prediction",
        args.n, args.k, args.t, args.joint
    );
    println!("  data generated in      {generate_seconds:.2} s");
    println!(
        "  host, 1 thread         {:>12.0} agents/s ({one_thread_seconds:.3} s)",
        agents / one_thread_seconds
    );
    println!(
        "  host, {threads} threads        {:>12.0} agents/s ({host_seconds:.3} s)",
        agents / host_seconds
    );

    if let Some(selection) = selection {
        let (tensor_seconds, upload_seconds, tensor_report) = selection.run(TensorPass {
            args: &args,
            data: &data,
        })?;
        let difference = max_relative_difference(&host_report, &tensor_report);
        println!(
            "  tensor ({})       {:>12.0} agents/s ({tensor_seconds:.3} s; upload {upload_seconds:.3} s)",
            selection.name(),
            agents / tensor_seconds
        );
        println!("  host vs tensor         max relative difference {difference:.2e}");
        let extra = serde_json::json!({
            "tensor_device": selection.name(),
            "tensor_batch": args.batch,
            "tensor_seconds": tensor_seconds,
            "tensor_agents_per_s": agents / tensor_seconds,
            "tensor_upload_seconds": upload_seconds,
            "host_tensor_max_relative_difference": difference,
        });
        if let (Some(figures), Some(extra)) = (figures.as_object_mut(), extra.as_object()) {
            figures.extend(extra.clone());
        }
    }
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.6}"));
    // K = 6 over fewer forecasts takes them all: name the K that was measured.
    let k = args.k.min(6);
    println!(
        "  minADE@{k} {}  minFDE@{k} {}  MR@{k} {}  brier-minFDE@{k} {}",
        show(k6.min_ade),
        show(k6.min_fde),
        show(k6.miss_rate),
        show(k6.brier_min_fde)
    );
    println!(
        "  minADE@1 {}  minFDE@1 {}  MR@1 {}",
        show(k1.min_ade),
        show(k1.min_fde),
        show(k1.miss_rate)
    );
    if args.joint > 1 {
        println!("  actorMR@{k} {}", show(k6.actor_miss_rate));
    }
    if args.trajectory_types {
        println!(
            "  mAP@{k} {}  soft mAP@{k} {}",
            show(k6.mean_average_precision),
            show(k6.soft_mean_average_precision)
        );
    }

    args.output.write(&figures)?;
    Ok(())
}
