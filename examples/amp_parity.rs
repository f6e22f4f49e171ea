//! Mixed-precision parity: the same seeded model trained in f32, f16-mixed and bf16-mixed.
//!
//! 1. Generates a seeded nonlinear regression dataset and one MLP initialization.
//! 2. Trains a copy in each precision with kiln's `Trainer` (Adam, cosine LR schedule) and
//!    evaluates the final full-dataset loss in f32 on the master weights.
//! 3. Injects an f16 overflow (a batch scaled by 1000) into a fresh f16 run to show
//!    skip-and-backoff: the step is skipped, the parameters and the LR schedule stay put, the
//!    loss scale halves.
//!
//! On the CPU (flex) f16 and bf16 are emulated, so they are slower than f32 there; the point
//! of this example is numerical parity. Step-time gains need a GPU (`--features cuda`, or
//! `--features wgpu` for a Vulkan GPU). A precision the device cannot run (bf16 on Mesa's
//! lavapipe) is reported as unsupported (`bf16_supported: false`) and skipped.
//!
//! The model, its batches and its step are kiln-ml-testkit's (`Mlp` with two hidden layers,
//! `RegressionBatch`, MSE under the trainer's autocast policy); only the data is drawn here.
//!
//! Run: `cargo run --release --example amp_parity -- --help`
//! On a Vulkan device: `cargo run --release --features wgpu --example amp_parity -- --device wgpu`

use std::time::Instant;

use anyhow::{Context, ensure};
use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::module::AutodiffModule;
use burn::nn::loss::{MseLoss, Reduction};
use burn::optim::AdamConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::Parser;
use kiln_ml::backend::BackendTask;
use kiln_ml::core::{PlainBatches, StepOutcome, StepReport};
use kiln_ml::train::{Precision, ProgressObserver, Trainer, TrainerConfig, materialize};
use kiln_ml_examples::cli::at_least_one;
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Train one seeded model in f32, f16-mixed and bf16-mixed and compare the final losses.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Samples in the synthetic dataset.
    #[arg(long, default_value_t = 4096, value_parser = at_least_one::<usize>)]
    samples: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<usize>)]
    batch_size: usize,
    /// Epochs per precision.
    #[arg(long, default_value_t = 12, value_parser = at_least_one::<u64>)]
    epochs: u64,
    /// Width of the two hidden layers.
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<usize>)]
    hidden: usize,
    /// Seed for data and weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Read the loss back every this many optimizer steps (0: only at the end; f16-mixed reads
    /// it every step anyway, for its loss scaler). 1 reproduces kiln's former behaviour, a
    /// readback every step, for a before/after step time.
    #[arg(long, default_value_t = 0)]
    read_loss_every: u64,
    /// Optimizer steps the host may queue ahead of the device before it waits (0: no bound).
    #[arg(long, default_value_t = 2)]
    max_queued_steps: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::CpuDeviceChoice,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

const FEATURES: usize = 16;

/// Host rows of `y = sin(a . x) + 0.5 (b . x)^2 / FEATURES + noise`.
fn dataset(samples: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let a: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-0.5..0.5)).collect();
    let b: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut inputs = Vec::with_capacity(samples * FEATURES);
    let mut targets = Vec::with_capacity(samples);
    for _ in 0..samples {
        let x: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
        let dot = |w: &[f32]| x.iter().zip(w).map(|(x, w)| x * w).sum::<f32>();
        let y =
            dot(&a).sin() + 0.5 * dot(&b).powi(2) / FEATURES as f32 + rng.random_range(-0.05..0.05);
        inputs.extend(x);
        targets.push(y);
    }
    (inputs, targets)
}

fn batches<B: Backend>(
    inputs: &[f32],
    targets: &[f32],
    batch_size: usize,
    device: &B::Device,
) -> Vec<RegressionBatch<B>> {
    targets
        .chunks(batch_size)
        .zip(inputs.chunks(batch_size * FEATURES))
        .map(|(y, x)| RegressionBatch::from_rows(x, y, device))
        .collect()
}

/// Mean squared error over all batches, in f32, without autodiff.
fn full_loss<B: Backend>(model: &Mlp<B>, batches: &[RegressionBatch<B>]) -> anyhow::Result<f64> {
    let mut total = 0.0;
    let mut rows = 0usize;
    for batch in batches {
        let count = batch.inputs.dims()[0];
        let loss = MseLoss::new().forward(
            model.forward(batch.inputs.clone()),
            batch.targets.clone(),
            Reduction::Sum,
        );
        let value: f64 = loss
            .into_data()
            .iter::<f64>()
            .next()
            .context("empty loss")?;
        total += value;
        rows += count;
    }
    Ok(total / rows as f64)
}

struct PrecisionRun {
    final_loss: f64,
    skipped_steps: u64,
    steps: u64,
    readbacks: u64,
    seconds: f64,
}

struct Overflow {
    skipped: u64,
    scale_before: f64,
    scale_after: f64,
    params_unchanged: bool,
    scheduler_unchanged: bool,
}

struct Report {
    runs: Vec<(Precision, PrecisionRun)>,
    /// Precisions the device cannot run, with the reason.
    unsupported: Vec<(Precision, String)>,
    overflow: Overflow,
}

struct AmpParity {
    args: Args,
}

impl BackendTask for AmpParity {
    type Output = anyhow::Result<Report>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<Report> {
        let args = self.args;
        let (inputs, targets) = dataset(args.samples, args.seed);
        let train = batches::<B>(&inputs, &targets, args.batch_size, &device);
        let eval = batches::<B::InnerBackend>(&inputs, &targets, args.batch_size, &device);
        let initial: Mlp<B> = MlpConfig::new(FEATURES, &[args.hidden, args.hidden], 1)
            .with_seed(args.seed)
            .init(&device);
        // Read every lazy parameter once so each clone starts from the same weights.
        materialize(&initial);
        let steps_per_epoch = train.len() as u64;
        let total_steps = steps_per_epoch * args.epochs;

        let mut runs = Vec::new();
        let mut unsupported = Vec::new();
        for precision in [Precision::F32, Precision::F16Mixed, Precision::Bf16Mixed] {
            if let Err(reason) = precision.check_supported::<B>(&device) {
                println!("{precision}: skipped, {reason}");
                unsupported.push((precision, reason.to_string()));
                continue;
            }
            let scheduler = CosineAnnealingLrSchedulerConfig::new(3e-3, total_steps as usize)
                .with_min_lr(1e-5)
                .init()
                .map_err(anyhow::Error::msg)?;
            let config = TrainerConfig::new()
                .with_precision(precision)
                .with_num_epochs(args.epochs)
                .with_seed(args.seed)
                .with_read_loss_every(args.read_loss_every)
                .with_max_queued_steps(args.max_queued_steps);
            let mut trainer = Trainer::new(
                initial.clone(),
                AdamConfig::new().init(),
                scheduler,
                config,
                device.clone(),
            )?;
            let progress =
                std::sync::Arc::new(ProgressObserver::new().with_total_steps(total_steps));
            trainer.add_observer(progress.clone());
            let started = Instant::now();
            let summary = trainer
                .fit(|position| PlainBatches::new(train.clone(), position, RegressionBatch::len))?;
            progress.finish();
            let seconds = started.elapsed().as_secs_f64();
            let final_loss = full_loss(&trainer.model().valid(), &eval)?;
            runs.push((
                precision,
                PrecisionRun {
                    final_loss,
                    skipped_steps: summary.counters.skipped_steps,
                    steps: summary.counters.optimizer_steps,
                    readbacks: summary.counters.readbacks,
                    seconds,
                },
            ));
        }

        // Overflow injection: a few clean f16 steps, then a batch scaled by 1000.
        let scheduler = CosineAnnealingLrSchedulerConfig::new(3e-3, total_steps as usize)
            .init()
            .map_err(anyhow::Error::msg)?;
        let config = TrainerConfig::new().with_precision(Precision::F16Mixed);
        let mut trainer = Trainer::new(
            initial.clone(),
            AdamConfig::new().init(),
            scheduler,
            config,
            device.clone(),
        )?;
        for batch in train.iter().take(5) {
            trainer.train_batch(batch.clone())?;
        }
        let scale_before = f64::from(trainer.loss_scaler().context("f16 has a scaler")?.scale());
        let skipped_before = trainer.counters().skipped_steps;
        let params_before = trainer.model().params();
        let lr_before = peek_learning_rate(trainer.scheduler());
        let huge = RegressionBatch {
            inputs: train[5].inputs.clone().mul_scalar(1000.0),
            targets: train[5].targets.clone(),
        };
        let report: StepReport = trainer.train_batch(huge)?.step.context("K = 1 steps")?;
        ensure!(
            matches!(report.outcome, StepOutcome::Skipped(_)),
            "the injected overflow was not detected"
        );
        let overflow = Overflow {
            skipped: trainer.counters().skipped_steps - skipped_before,
            scale_before,
            scale_after: f64::from(trainer.loss_scaler().context("f16 has a scaler")?.scale()),
            params_unchanged: trainer.model().params() == params_before,
            scheduler_unchanged: peek_learning_rate(trainer.scheduler()) == lr_before,
        };
        Ok(Report {
            runs,
            unsupported,
            overflow,
        })
    }
}

fn peek_learning_rate<S: burn::lr_scheduler::LrScheduler>(scheduler: &S) -> f64 {
    scheduler.clone().step()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.samples >= 6 * args.batch_size,
        "--samples {} makes {} batches of --batch-size {}: the comparison needs at least 6",
        args.samples,
        args.samples / args.batch_size,
        args.batch_size
    );
    let selection = args.device.select()?;
    println!("device: {selection}");
    let report = selection.run(AmpParity { args: args.clone() })?;

    let loss_of = |wanted: Precision| {
        report
            .runs
            .iter()
            .find(|(precision, _)| *precision == wanted)
            .map(|(_, run)| run)
    };
    let (Some(f32_run), Some(f16_run)) = (loss_of(Precision::F32), loss_of(Precision::F16Mixed))
    else {
        anyhow::bail!("the f32 or the f16-mixed run is missing: every kiln device runs both");
    };
    let bf16_run = loss_of(Precision::Bf16Mixed);
    let relative =
        |run: &PrecisionRun| (run.final_loss - f32_run.final_loss).abs() / f32_run.final_loss;
    println!("precision   final loss   vs f32    skipped  steps  readbacks  seconds");
    for (precision, run) in &report.runs {
        println!(
            "{:<10}  {:>10.6}  {:>7.3}%  {:>7}  {:>5}  {:>9}  {:>7.2}",
            precision.name(),
            run.final_loss,
            100.0 * relative(run),
            run.skipped_steps,
            run.steps,
            run.readbacks,
            run.seconds
        );
    }
    for (precision, reason) in &report.unsupported {
        println!(
            "{:<10}  unsupported by the device: {reason}",
            precision.name()
        );
    }
    let overflow = &report.overflow;
    println!(
        "injected f16 overflow: {} step skipped, loss scale {} -> {}, parameters unchanged: {}, LR schedule unchanged: {}",
        overflow.skipped,
        overflow.scale_before,
        overflow.scale_after,
        overflow.params_unchanged,
        overflow.scheduler_unchanged
    );
    let verdict = |run: Option<&PrecisionRun>| match run {
        None => "unsupported",
        Some(run) if relative(run) <= 0.02 => "met",
        Some(_) => "MISSED",
    };
    println!(
        "target (within 2% of f32): f16 {}, bf16 {}",
        verdict(Some(f16_run)),
        verdict(bf16_run)
    );

    if args.output.json.is_some() {
        let json = serde_json::json!({
            "device": selection.name(),
            "samples": args.samples,
            "batch_size": args.batch_size,
            "epochs": args.epochs,
            "read_loss_every": args.read_loss_every,
            "max_queued_steps": args.max_queued_steps,
            "steps": f32_run.steps,
            "f32_final_loss": f32_run.final_loss,
            "f16_final_loss": f16_run.final_loss,
            "bf16_final_loss": bf16_run.map(|run| run.final_loss),
            "f16_relative_diff": relative(f16_run),
            "bf16_relative_diff": bf16_run.map(relative),
            "bf16_supported": bf16_run.is_some(),
            "bf16_unsupported_reason": report
                .unsupported
                .iter()
                .find(|(precision, _)| *precision == Precision::Bf16Mixed)
                .map(|(_, reason)| reason),
            "f16_skipped_steps": f16_run.skipped_steps,
            "bf16_skipped_steps": bf16_run.map(|run| run.skipped_steps),
            "f32_seconds": f32_run.seconds,
            "f16_seconds": f16_run.seconds,
            "bf16_seconds": bf16_run.map(|run| run.seconds),
            "f32_seconds_per_step": f32_run.seconds / f32_run.steps as f64,
            "f16_seconds_per_step": f16_run.seconds / f16_run.steps as f64,
            "bf16_seconds_per_step": bf16_run.map(|run| run.seconds / run.steps as f64),
            "f32_readbacks_per_step": f32_run.readbacks as f64 / f32_run.steps as f64,
            "f16_readbacks_per_step": f16_run.readbacks as f64 / f16_run.steps as f64,
            "bf16_readbacks_per_step": bf16_run.map(|run| run.readbacks as f64 / run.steps as f64),
            "overflow_skipped": overflow.skipped,
            "overflow_scale_before": overflow.scale_before,
            "overflow_scale_after": overflow.scale_after,
            "overflow_params_unchanged": overflow.params_unchanged,
            "overflow_scheduler_unchanged": overflow.scheduler_unchanged,
        });
        args.output.write(&json)?;
    }
    // The accuracy targets depend on the device; the overflow's skip-and-backoff does not.
    ensure!(
        overflow.skipped == 1 && overflow.params_unchanged && overflow.scheduler_unchanged,
        "the injected f16 overflow was not skipped cleanly: {} step(s) skipped, parameters \
         unchanged {}, LR schedule unchanged {}",
        overflow.skipped,
        overflow.params_unchanged,
        overflow.scheduler_unchanged
    );
    Ok(())
}
