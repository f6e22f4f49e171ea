//! Data parallelism: N replicas at batch b follow one device at batch N·b.
//!
//! Plans one block-shuffled epoch over a synthetic dataset of many files with kiln-ml-sampler, then
//! trains the same seeded model twice for the same optimizer steps:
//!
//! 1. on one device, with global batches of N·b samples;
//! 2. on N devices (`--devices N`), one replica per device, each fed its rank's shard of the
//!    same plan (b samples of each global batch), gradients summed across replicas by kiln's
//!    in-process all-reduce (burn-collective across nodes) and normalized by all replicas'
//!    micro-batches.
//!
//! and reports the largest parameter difference (floating-point noise: the targets are 1e-5 in
//! f32 (1e-3 on CUDA, whose f32 products round to TF32), 1e-3 in f16-mixed, 1e-2 in bf16-mixed, about each compute type's machine epsilon), whether the replicas agree bit for bit, and the
//! seconds per optimizer step of each run. Replica 1 starts from other weights than replica 0:
//! joining the run gives every replica rank 0's.
//!
//! `--device cpu` runs every replica on the CPU (flex, one thread each); `--device wgpu`
//! (`--features wgpu`) on the Vulkan adapter, which the replicas share when there is one;
//! `--device cuda` (`--features cuda`) on CUDA devices 0..N.
//!
//! Run: `cargo run --release --example data_parallel -- --devices 2`

use std::time::Instant;

use anyhow::ensure;
use burn::optim::SgdConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::Parser;
use kiln_ml::backend::{DevicesTask, Selection};
use kiln_ml::core::{Fingerprint, Layout, PlainBatches, PlanRequest, Sampler, Shard};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy, Sharding};
use kiln_ml::train::{DataParallel, LossScalerConfig, Precision, TrainerConfig};
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Train N replicas at batch b and one device at batch N·b; compare the weights.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Replicas, one per device (N).
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// Samples per replica per micro-batch (b).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Optimizer steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Micro-batches accumulated per optimizer step, on every replica.
    #[arg(long, default_value_t = 1)]
    accumulation: usize,
    /// Width of the model's two hidden layers.
    #[arg(long, default_value_t = 256, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    width: usize,
    /// f32, f16_mixed or bf16_mixed.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.05, value_parser = kiln_ml_examples::cli::positive_finite)]
    learning_rate: f64,
    /// Seed for the data, the plan and the weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::CpuDeviceChoice,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

const FEATURES: usize = 16;
/// Rows per file of the synthetic dataset (two blocks of half that each).
const ROWS_PER_FILE: u64 = 64;

/// The model: kiln-ml-testkit's seeded MLP (FEATURES → width → width → 1, mean squared error), so
/// every replica and the single run can build any seed's weights on the host.
fn model<B: Backend>(width: usize, seed: u64, device: &B::Device) -> Mlp<B> {
    MlpConfig::new(FEATURES, &[width, width], 1)
        .with_seed(seed)
        .init(device)
}

/// The dataset: every sample's features and target, a pure function of the seed.
struct Dataset {
    inputs: Vec<f32>,
    targets: Vec<f32>,
    layout: Layout,
}

impl Dataset {
    fn new(samples: u64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let teacher: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut inputs = Vec::with_capacity(samples as usize * FEATURES);
        let mut targets = Vec::with_capacity(samples as usize);
        for _ in 0..samples {
            let x: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
            let y: f32 = x.iter().zip(&teacher).map(|(x, w)| x * w).sum();
            inputs.extend(x);
            targets.push(y.tanh() + rng.random_range(-0.05..0.05));
        }
        let mut builder = Layout::builder();
        for file in 0..samples.div_ceil(ROWS_PER_FILE) {
            let rows = ROWS_PER_FILE.min(samples - file * ROWS_PER_FILE);
            let half = rows / 2;
            builder.add_file(
                Fingerprint::builder()
                    .str("data_parallel")
                    .u64(file)
                    .finish(),
                &[half, rows - half],
            );
        }
        let layout = builder.build().expect("blocks tile the samples");
        Self {
            inputs,
            targets,
            layout,
        }
    }

    /// The batches of one shard's plan: `per_batch` samples each, in plan order.
    fn batches<B: Backend>(
        &self,
        args: &Args,
        per_batch: usize,
        shard: Shard,
        device: &B::Device,
    ) -> anyhow::Result<Vec<RegressionBatch<B>>> {
        let sampler = BlockShuffleConfig::default()
            .with_sharding(Sharding::new(per_batch as u64, RemainderPolicy::Drop))
            .init()?;
        let request = PlanRequest::new(args.seed, 0).with_shard(shard);
        let plan = sampler.plan(&self.layout, &request)?;
        Ok(plan
            .order()
            .chunks(per_batch)
            .map(|ids| {
                let mut inputs = Vec::with_capacity(ids.len() * FEATURES);
                let mut targets = Vec::with_capacity(ids.len());
                for &id in ids {
                    let id = id as usize;
                    inputs.extend_from_slice(&self.inputs[id * FEATURES..(id + 1) * FEATURES]);
                    targets.push(self.targets[id]);
                }
                RegressionBatch::from_rows(&inputs, &targets, device)
            })
            .collect())
    }
}

fn config(args: &Args) -> TrainerConfig {
    TrainerConfig::new()
        .with_num_epochs(1)
        .with_max_steps(Some(args.steps as u64))
        .with_precision(args.precision)
        .with_accumulation_steps(args.accumulation as u32)
        // A scale no step of this model overflows at, so both runs skip the same (no) steps:
        // the comparison measures rounding, not the loss scaler's schedule.
        .with_loss_scaler(LossScalerConfig {
            init_scale: 1024.0,
            ..LossScalerConfig::default()
        })
}

struct Report {
    max_abs_param_diff: f64,
    replicas_agree: bool,
    seconds_per_step_single: f64,
    seconds_per_step_parallel: f64,
    single_final_loss: Option<f64>,
    parallel_final_loss: Option<f64>,
}

struct Compare {
    args: Args,
}

impl DevicesTask for Compare {
    type Output = anyhow::Result<Report>;

    fn run<B: AutodiffBackend>(self, devices: Vec<B::Device>) -> anyhow::Result<Report> {
        let args = &self.args;
        let replicas = devices.len();
        let global = args.batch * replicas;
        let micro_batches = args.steps * args.accumulation;
        let dataset = Dataset::new((micro_batches * global) as u64, args.seed);
        let device = devices[0].clone();
        args.precision.check_supported::<B>(&device)?;

        // One device at the global batch.
        let batches = dataset.batches::<B>(args, global, Shard::SINGLE, &device)?;
        ensure!(
            batches.len() == micro_batches,
            "the plan has every micro-batch"
        );
        let mut single = config(args).init(
            model::<B>(args.width, args.seed, &device),
            SgdConfig::new().init(),
            args.learning_rate,
            device.clone(),
        )?;
        let started = Instant::now();
        let summary = single
            .fit(|position| PlainBatches::new(batches.clone(), position, RegressionBatch::len))?;
        let single_seconds = started.elapsed().as_secs_f64();
        ensure!(summary.counters.optimizer_steps == args.steps as u64);

        // N replicas at batch b, each on its shard of the same plan.
        let outcomes = DataParallel::local().run::<B, _, _>(devices, |replica| {
            let device = replica.device().clone();
            let batches = dataset
                .batches::<B>(args, args.batch, replica.shard(), &device)
                .map_err(|error| kiln_ml::train::Error::InvalidDataParallel {
                    reason: format!("planning rank {}: {error}", replica.rank()),
                })?;
            // Every replica but rank 0 starts from other weights: joining replaces them.
            let model = model::<B>(args.width, args.seed + u64::from(replica.rank()), &device);
            let mut trainer = config(args)
                .init(model, SgdConfig::new().init(), args.learning_rate, device)?
                .joined(&replica)?;
            let started = Instant::now();
            let summary = trainer.fit(|position| {
                PlainBatches::new(batches.clone(), position, RegressionBatch::len)
            })?;
            let seconds = started.elapsed().as_secs_f64();
            Ok((summary, seconds, trainer.model().params()))
        })?;
        let parallel_seconds = outcomes
            .iter()
            .map(|(_, seconds, _)| *seconds)
            .fold(0.0, f64::max);
        let reference = single.model().params();
        let rank_0 = &outcomes[0].2;
        let max_abs_param_diff = kiln_ml_examples::compare::max_abs_diff(&reference, rank_0);
        Ok(Report {
            max_abs_param_diff,
            replicas_agree: outcomes.iter().all(|(_, _, params)| params == rank_0),
            seconds_per_step_single: single_seconds / args.steps as f64,
            seconds_per_step_parallel: parallel_seconds / args.steps as f64,
            single_final_loss: summary.last_loss,
            parallel_final_loss: outcomes[0].0.last_loss,
        })
    }
}

/// The stated tolerance of each precision (docs/training.md): 1e-5 in f32 (1e-3 on CUDA, whose
/// f32 products round to TF32); in mixed precision about the compute type's machine epsilon
/// (f16 9.8e-4, bf16 7.8e-3), since each replica rounds its own half of the batch's
/// activations.
fn tolerance(precision: Precision, selection: &Selection) -> f64 {
    let cuda = selection.name().starts_with("cuda");
    match precision {
        Precision::F32 if cuda => 1e-3,
        Precision::F32 => 1e-5,
        Precision::F16Mixed => 1e-3,
        Precision::Bf16Mixed => 1e-2,
        // A precision added later: bf16's, the loosest known.
        _ => 1e-2,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.devices >= 1 && args.batch >= 1 && args.steps >= 1 && args.accumulation >= 1,
        "--devices, --batch, --steps and --accumulation must be at least 1"
    );
    let selection = args.device.select()?;
    println!("device: {selection}");
    println!(
        "{} replicas x {} samples vs 1 device x {} samples, {} optimizer steps ({} micro-batches each), {}",
        args.devices,
        args.batch,
        args.devices * args.batch,
        args.steps,
        args.accumulation,
        args.precision
    );
    let report = selection.run_on_devices(args.devices, Compare { args: args.clone() })??;
    let target = tolerance(args.precision, &selection);
    println!(
        "max |parameter difference| after {} steps: {:.3e} (target <= {target:.0e}: {}); replicas agree bit for bit: {}",
        args.steps,
        report.max_abs_param_diff,
        if report.max_abs_param_diff <= target {
            "met"
        } else {
            "MISSED"
        },
        report.replicas_agree
    );
    println!(
        "seconds per optimizer step: one device {:.4}, {} replicas {:.4} ({:.2}x)",
        report.seconds_per_step_single,
        args.devices,
        report.seconds_per_step_parallel,
        report.seconds_per_step_single / report.seconds_per_step_parallel
    );
    if let (Some(single), Some(parallel)) = (report.single_final_loss, report.parallel_final_loss) {
        println!("last loss: one device {single:.6}, replicas {parallel:.6}");
    }
    if args.output.json.is_some() {
        let json = serde_json::json!({
            "devices": args.devices,
            "device": selection.name(),
            "precision": args.precision.to_string(),
            "batch_per_device": args.batch,
            "accumulation_steps": args.accumulation,
            "steps": args.steps,
            "max_abs_param_diff": report.max_abs_param_diff,
            "tolerance": target,
            "replicas_agree": report.replicas_agree,
            "seconds_per_step_single": report.seconds_per_step_single,
            "seconds_per_step_parallel": report.seconds_per_step_parallel,
            "single_final_loss": report.single_final_loss,
            "parallel_final_loss": report.parallel_final_loss,
        });
        args.output.write(&json)?;
    }
    // What the example checks is correctness: a miss fails the run, once the figures are out.
    ensure!(
        report.replicas_agree,
        "the replicas' parameters differ: they must agree bit for bit"
    );
    ensure!(
        report.max_abs_param_diff <= target,
        "the replicas drifted from one device at the global batch: {:.3e} > {target:.0e}",
        report.max_abs_param_diff
    );
    Ok(())
}
