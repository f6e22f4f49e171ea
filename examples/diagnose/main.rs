//! Input-bound or compute-bound? kiln-ml-profile's cached-batch test on two pipelines built to be
//! one and the other.
//!
//! - **input-bound**: a small model fed by one loader worker whose preprocessing costs
//!   `--slow-transform-us` of CPU per sample: the device waits for every batch.
//! - **compute-bound**: a wide, deep model fed by the same loader without the cost: the batches
//!   are ready before the step wants them.
//!
//! For each, N steps on one batch kept on the device are timed against N steps from the real
//! loader (after warm-up steps that also drain the loader's prefetch), with the share of time
//! spent waiting for data and, where NVML answers, the GPU's utilization; the verdict comes
//! with its evidence and thresholds, and a check that the loss falls on the cached batch.
//!
//! Run: `cargo run --release --example diagnose -- --help`

mod pipeline;
mod tuning;

use std::time::{Duration, Instant};

use anyhow::Context;
use burn::optim::AdamConfig;
use burn::tensor::backend::AutodiffBackend;
use clap::Parser;
use kiln_ml::backend::BackendTask;
use kiln_ml::core::PlanRequest;
use kiln_ml::data::{BurnCollate, LoaderConfig};
use kiln_ml::profile::{Bottleneck, Clock, DeviceMonitor, Diagnosis, LoaderTuning};
use kiln_ml::sampler::{RemainderPolicy, SequentialSampler, Sharding};
use kiln_ml::train::TrainerConfig;

use crate::pipeline::SyntheticSource;
use kiln_ml_examples::cached_batch;
use kiln_ml_examples::regressor::{self, RegressionBatch, RowBatcher};

/// Diagnose an input-bound and a compute-bound training pipeline with kiln-ml-profile's
/// cached-batch test, and print both verdicts with their evidence.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Samples in each pipeline's dataset.
    #[arg(long, default_value_t = 8192)]
    samples: u64,
    /// Samples per batch.
    #[arg(long, default_value_t = 64)]
    batch: u64,
    /// Steps run before measuring, per run (more than the loader prefetches).
    #[arg(long, default_value_t = 6)]
    warmup: usize,
    /// Steps measured, per run.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// CPU time of the input-bound pipeline's preprocessing, per sample, in microseconds.
    #[arg(long, default_value_t = 1500)]
    slow_transform_us: u64,
    /// Hidden width of the input-bound pipeline's (small) model.
    #[arg(long, default_value_t = 32, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    small_width: usize,
    /// Hidden width of the compute-bound pipeline's model.
    #[arg(long, default_value_t = 768, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    wide_width: usize,
    /// Hidden layers of the compute-bound pipeline's model.
    #[arg(long, default_value_t = 4, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    wide_depth: usize,
    /// Loader worker threads of both pipelines.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Seed of the weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::DeviceChoice,
    /// Also measure the input-bound pipeline's loader for 0, 1, 2, 4, ... workers and a few
    /// prefetch depths, and recommend a setting.
    #[arg(long)]
    tune_loader: bool,
    /// Batches each loader setting reads when tuning.
    #[arg(long, default_value_t = 12, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    tune_batches: usize,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// One pipeline to diagnose.
#[derive(Debug, Clone, Copy)]
struct Pipeline {
    name: &'static str,
    width: usize,
    depth: usize,
    cost_per_sample: Duration,
}

struct Diagnose {
    args: Args,
    pipelines: [Pipeline; 2],
}

/// Both diagnoses, and the input-bound pipeline's loader tuning when asked for.
type Outcome = (Vec<Diagnosis>, Option<LoaderTuning>);

impl BackendTask for Diagnose {
    type Output = anyhow::Result<Outcome>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<Outcome> {
        let diagnoses = self
            .pipelines
            .iter()
            .map(|pipeline| {
                diagnose::<B>(&self.args, pipeline, device.clone())
                    .with_context(|| format!("diagnosing the {} pipeline", pipeline.name))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let tuning = if self.args.tune_loader {
            Some(tuning::tune_loader::<B>(
                &self.args,
                &self.pipelines[0],
                &device,
            )?)
        } else {
            None
        };
        Ok((diagnoses, tuning))
    }
}

fn diagnose<B: AutodiffBackend>(
    args: &Args,
    pipeline: &Pipeline,
    device: B::Device,
) -> anyhow::Result<Diagnosis> {
    B::seed(&device, args.seed);
    let model = regressor::regressor::<B>(pipeline.width, pipeline.depth, args.seed, &device);
    let mut trainer = TrainerConfig::new().with_seed(args.seed).init(
        model,
        AdamConfig::new().init(),
        1e-3,
        device.clone(),
    )?;
    let source = SyntheticSource::new(args.samples, args.batch, pipeline.cost_per_sample)?;
    // Little read-ahead, so the loader's backlog drains within the warm-up steps.
    let loader = LoaderConfig::new()
        .with_workers(args.workers)
        .with_prefetch_batches(2)
        .with_read_ahead_blocks(1)
        .init(
            source,
            BurnCollate::<B, _, RegressionBatch<B>>::new(RowBatcher, device.clone()),
        )?;
    let sampler = SequentialSampler::new(Sharding::new(args.batch, RemainderPolicy::Drop));
    let cached_batch = loader
        .plan_epoch(&sampler, &PlanRequest::new(args.seed, 0))?
        .next()
        .context("the dataset holds no whole batch")??;

    let clock = Clock::start();
    let monitor = DeviceMonitor::builder(clock).start()?;
    let next_batch = cached_batch::epoch_after_epoch(
        |epoch| loader.plan_epoch(&sampler, &PlanRequest::new(args.seed, epoch)),
        0,
    );
    let bottleneck = Bottleneck::new()
        .steps(args.warmup, args.steps)
        .with_monitor(&monitor);
    // Takes `next_batch`, and drops its epoch before the monitor stops.
    let diagnosis = cached_batch::diagnose(bottleneck, &mut trainer, cached_batch, next_batch)?;
    monitor.stop();
    Ok(diagnosis)
}

/// FLOP/s the cached-batch run achieved (forward and backward, a multiply-add counted as 2).
fn achieved_flops(args: &Args, pipeline: &Pipeline, diagnosis: &Diagnosis) -> f64 {
    let forward = regressor::forward_flops_per_sample(pipeline.width, pipeline.depth);
    kiln_ml::profile::flops::training_step(forward, args.batch) * diagnosis.cached.steps_per_s
}

fn print(pipeline: &Pipeline, diagnosis: &Diagnosis) {
    println!(
        "{:<14} verdict: {}  (cached {:.1} steps/s, real {:.1} steps/s, data wait {:.0}%)",
        pipeline.name,
        diagnosis.verdict,
        diagnosis.cached.steps_per_s,
        diagnosis.real.steps_per_s,
        100.0 * diagnosis.real.data_wait_share
    );
    for line in &diagnosis.evidence {
        println!("{:<14}   - {line}", "");
    }
    if diagnosis.cached_loss_decreased == Some(true) {
        println!("{:<14}   - the loss falls on the cached batch", "");
    }
    for warning in &diagnosis.warnings {
        println!("{:<14}   ! {warning}", "");
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.batch > 0 && args.samples >= args.batch && args.steps > 0 && args.workers > 0,
        "--batch, --steps and --workers must be at least 1 and --samples at least --batch"
    );
    let selection = args.device.select()?;
    println!("device         {selection}");
    let pipelines = [
        Pipeline {
            name: "input-bound",
            width: args.small_width,
            depth: 1,
            cost_per_sample: Duration::from_micros(args.slow_transform_us),
        },
        Pipeline {
            name: "compute-bound",
            width: args.wide_width,
            depth: args.wide_depth,
            cost_per_sample: Duration::ZERO,
        },
    ];
    let started = Instant::now();
    let (diagnoses, tuning) = selection.run(Diagnose {
        args: args.clone(),
        pipelines,
    })?;
    for (pipeline, diagnosis) in pipelines.iter().zip(&diagnoses) {
        print(pipeline, diagnosis);
    }
    let compute_flops = achieved_flops(&args, &pipelines[1], &diagnoses[1]);
    println!(
        "compute-bound  the cached batch runs at {:.2} GFLOP/s (MFU needs the device's peak: \
         kiln_ml::profile::peak_flops)",
        compute_flops / 1e9
    );
    if let Some(tuning) = &tuning {
        println!(
            "loader tuning of the input-bound pipeline ({} batches per setting):",
            tuning::batches_per_setting(&args)
        );
        print!("{}", tuning.table());
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("done in {seconds:.1} s");
    if args.output.json.is_some() {
        let json = serde_json::json!({
            "device": selection.name(),
            "input_bound_verdict": diagnoses[0].verdict,
            "compute_bound_verdict": diagnoses[1].verdict,
            "input_bound": diagnoses[0],
            "compute_bound": diagnoses[1],
            "compute_bound_flops_per_s": compute_flops,
            "loader_tuning": tuning,
            "seconds": seconds,
        });
        args.output.write(&json)?;
    }
    Ok(())
}
