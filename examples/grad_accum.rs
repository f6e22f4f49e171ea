//! Gradient accumulation done right: K micro-batches of b rows equal one batch of K·b rows.
//!
//! Trains two copies of one seeded model for the same optimizer steps: one with kiln's trainer
//! accumulating K micro-batches of `b` rows per step, one on single batches of `K·b` rows, and
//! reports the largest parameter difference (floating-point noise only). For contrast it also
//! runs Burn 0.21's `GradientsAccumulator` as its loop uses it (gradients summed, not
//! averaged; the loop's other quirks, a dropped last window and an LR step per micro-batch,
//! are not emulated), whose parameters drift away. Each epoch ends with a partial window that kiln divides by its own
//! size.
//!
//! The model, its batches and its step are kiln-ml-testkit's (`Mlp`, `RegressionBatch`): a
//! seeded MLP learning a noisy teacher; only the data is drawn here.
//!
//! Run: `cargo run --release --example grad_accum -- --help`

use anyhow::{Context, ensure};
use burn::module::AutodiffModule;
use burn::nn::loss::{MseLoss, Reduction};
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::Parser;
use kiln_ml::backend::BackendTask;
use kiln_ml::core::PlainBatches;
use kiln_ml::train::{Autocast, TrainStep, Trainer, TrainerConfig, materialize};
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Compare K accumulated micro-batches with one large batch, step by step.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Micro-batches per optimizer step (K, at least 2).
    #[arg(long, default_value_t = 4, value_parser = kiln_ml_examples::cli::at_least_two::<usize>)]
    accumulation: usize,
    /// Rows per micro-batch (b).
    #[arg(long, default_value_t = 16, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    micro_batch: usize,
    /// Full optimizer steps per epoch (each epoch adds one partial window of K/2 micro-batches).
    #[arg(long, default_value_t = 10, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    steps_per_epoch: usize,
    /// Epochs.
    #[arg(long, default_value_t = 10, value_parser = kiln_ml_examples::cli::at_least_one::<u64>)]
    epochs: u64,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.2, value_parser = kiln_ml_examples::cli::positive_finite)]
    learning_rate: f64,
    /// Seed for data and weights.
    #[arg(long, default_value_t = 3)]
    seed: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::CpuDeviceChoice,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

const FEATURES: usize = 8;

fn rows(count: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let teacher: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut inputs = Vec::with_capacity(count * FEATURES);
    let mut targets = Vec::with_capacity(count);
    for _ in 0..count {
        let x: Vec<f32> = (0..FEATURES).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y = x
            .iter()
            .zip(&teacher)
            .map(|(x, w)| x * w)
            .sum::<f32>()
            .tanh()
            + rng.random_range(-0.05..0.05);
        inputs.extend(x);
        targets.push(y);
    }
    (inputs, targets)
}

/// Consecutive groups of `rows_per_batch` rows.
fn split<B: Backend>(
    inputs: &[f32],
    targets: &[f32],
    rows_per_batch: usize,
    device: &B::Device,
) -> Vec<RegressionBatch<B>> {
    targets
        .chunks(rows_per_batch)
        .zip(inputs.chunks(rows_per_batch * FEATURES))
        .map(|(y, x)| RegressionBatch::from_rows(x, y, device))
        .collect()
}

fn max_abs_diff(left: &[f32], right: &[f32]) -> f64 {
    kiln_ml_examples::compare::max_abs_diff(left, right)
}

struct Report {
    max_abs_param_diff: f64,
    summed_max_abs_param_diff: f64,
    optimizer_steps: u64,
    micro_batches: u64,
    accumulated_final_loss: f64,
    large_batch_final_loss: f64,
}

struct GradAccum {
    args: Args,
}

impl BackendTask for GradAccum {
    type Output = anyhow::Result<Report>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<Report> {
        let args = self.args;
        let k = args.accumulation;
        let b = args.micro_batch;
        // Each epoch: `steps_per_epoch` full windows, then a partial one of k/2 micro-batches.
        let partial = (k / 2).max(1);
        let rows_per_epoch = (args.steps_per_epoch * k + partial) * b;
        let (inputs, targets) = rows(rows_per_epoch, args.seed);
        let micro = split::<B>(&inputs, &targets, b, &device);
        // The large-batch run sees the same windows as single batches of up to K·b rows.
        let large = split::<B>(&inputs, &targets, k * b, &device);

        let initial: Mlp<B> = MlpConfig::new(FEATURES, &[32], 1)
            .with_seed(args.seed)
            .init(&device);
        materialize(&initial);

        let trainer = |accumulation: usize| {
            let config = TrainerConfig::new()
                .with_num_epochs(args.epochs)
                .with_accumulation_steps(accumulation as u32);
            Trainer::new(
                initial.clone(),
                SgdConfig::new().init(),
                args.learning_rate,
                config,
                device.clone(),
            )
        };
        let mut accumulated = trainer(k)?;
        let summary = accumulated
            .fit(|position| PlainBatches::new(micro.clone(), position, RegressionBatch::len))?;
        let mut single = trainer(1)?;
        let large_summary = single
            .fit(|position| PlainBatches::new(large.clone(), position, RegressionBatch::len))?;
        ensure!(
            summary.counters.optimizer_steps == large_summary.counters.optimizer_steps,
            "both runs must take the same optimizer steps"
        );

        // Burn 0.21's GradientsAccumulator: gradients summed over the window, never divided.
        let mut model = initial.clone();
        let mut optim = SgdConfig::new().init::<B, Mlp<B>>();
        for _ in 0..args.epochs {
            for window in micro.chunks(k) {
                let mut accumulator = GradientsAccumulator::<Mlp<B>>::new();
                for batch in window {
                    let step = model.step(batch.clone(), &Autocast::new(Default::default()));
                    let grads = GradientsParams::from_grads(step.loss.backward(), &model);
                    accumulator.accumulate(&model, grads);
                }
                model = optim.step(args.learning_rate, model, accumulator.grads());
            }
        }

        let reference = single.model().params();
        let eval = split::<B::InnerBackend>(&inputs, &targets, rows_per_epoch, &device);
        let loss = |model: &Mlp<B::InnerBackend>| -> anyhow::Result<f64> {
            let batch = eval.first().context("no rows")?;
            MseLoss::new()
                .forward(
                    model.forward(batch.inputs.clone()),
                    batch.targets.clone(),
                    Reduction::Mean,
                )
                .into_data()
                .iter::<f64>()
                .next()
                .context("empty loss")
        };
        Ok(Report {
            max_abs_param_diff: max_abs_diff(&accumulated.model().params(), &reference),
            summed_max_abs_param_diff: max_abs_diff(&model.params(), &reference),
            optimizer_steps: summary.counters.optimizer_steps,
            micro_batches: summary.counters.micro_batches,
            accumulated_final_loss: loss(&accumulated.model().valid())?,
            large_batch_final_loss: loss(&single.model().valid())?,
        })
    }
}

fn main() -> anyhow::Result<()> {
    // clap's value parsers already refuse --accumulation < 2 and empty batches or epochs.
    let args = Args::parse();
    let selection = args.device.select()?;
    println!("device: {selection}");
    let report = selection.run(GradAccum { args: args.clone() })?;
    println!(
        "K = {} micro-batches of {} rows vs batches of {} rows: {} optimizer steps ({} micro-batches)",
        args.accumulation,
        args.micro_batch,
        args.accumulation * args.micro_batch,
        report.optimizer_steps,
        report.micro_batches
    );
    println!(
        "max |parameter difference|: kiln (averaged, partial windows by own size) {:.3e}; \
         summed as Burn 0.21's GradientsAccumulator does {:.3e}",
        report.max_abs_param_diff, report.summed_max_abs_param_diff
    );
    println!(
        "final loss: accumulated {:.6}, large batch {:.6}",
        report.accumulated_final_loss, report.large_batch_final_loss
    );
    println!(
        "target (<= 1e-5): {}",
        if report.max_abs_param_diff <= 1e-5 {
            "met"
        } else {
            "MISSED"
        }
    );
    if args.output.json.is_some() {
        let json = serde_json::json!({
            "device": selection.name(),
            "accumulation_steps": args.accumulation,
            "micro_batch_rows": args.micro_batch,
            "optimizer_steps": report.optimizer_steps,
            "micro_batches": report.micro_batches,
            "max_abs_param_diff": report.max_abs_param_diff,
            "summed_max_abs_param_diff": report.summed_max_abs_param_diff,
            "accumulated_final_loss": report.accumulated_final_loss,
            "large_batch_final_loss": report.large_batch_final_loss,
        });
        args.output.write(&json)?;
    }
    ensure!(
        report.max_abs_param_diff <= 1e-5,
        "accumulation drifted from the large batch: {:.3e} > 1e-5",
        report.max_abs_param_diff
    );
    Ok(())
}
