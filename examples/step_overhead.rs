//! Step overhead: what one training step costs beyond its arithmetic, in kernels launched,
//! device syncs and milliseconds, with Burn's Adam and with kiln's fused one.
//!
//! On a model of many small tensors (kiln-ml-testkit's `Mlp`, 12 layers: 24 parameter tensors)
//! a GPU step waits on launches and syncs, not on arithmetic. This example measures, on one
//! device and in one run:
//!
//! 1. **The optimizer phase** (`burn_optimizer_ms`, `kiln_optimizer_ms`): the mean device time
//!    of the trainer's optimizer phase (unscale, global-norm clipping, update), timed with a
//!    device sync at each phase boundary, with Burn's `Adam` and with kiln's `FusedAdam` (two
//!    trainers timed in alternating rounds, so the machine's load falls on both alike).
//! 2. **Parity** (`max_abs_param_diff`): the largest difference between the two models'
//!    parameters after `--steps` steps from the same weights on the same batches.
//! 3. **Kernel launches per step** (`kernels_per_step_before` with Burn's Adam,
//!    `kernels_per_step_after` with kiln's): counted from CubeCL's launch log in a child
//!    process (logging slows the host, so no timing is taken there); null on flex, which
//!    launches no kernels.
//! 4. **Syncs per step** (`syncs_per_step`): the device syncs and readbacks the trainer made
//!    without a profiler, per optimizer step (`lagged_waits_per_step`: waits for a step that
//!    finished `max_queued_steps` steps ago, which keep the queue full).
//! 5. **The cheap profiler's cost** (`profiler_cheap_overhead`): step time with kiln-ml-profile's
//!    cheap phase timer (`TimingMode::CHEAP`) over step time without it, in alternating runs of
//!    `--overhead-steps` steps (a multiple of the timer's period, so that each run pays for its
//!    share of accurate steps): the median of each round's ratio.
//!
//! Run: `cargo run --release --features wgpu --example step_overhead -- --device wgpu --json out.json`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, ensure};
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use clap::Parser;
use kiln_ml::backend::{BackendTask, GpuTuning, LaunchLog, Selection};
use kiln_ml::profile::{Clock, PhaseTimer, TimingMode};
use kiln_ml::train::{
    FusedAdam, FusedAdamConfig, GradientClipping, Precision, Trainer, TrainerConfig,
};
use kiln_ml_examples::cli::at_least_one;
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch, TEACHER_INPUTS, teacher_batches};
use serde::{Deserialize, Serialize};

/// Measure the launches, syncs and milliseconds of a training step with Burn's Adam and with
/// kiln's fused Adam.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Optimizer steps of the parity run (both optimizers, the same batches).
    #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>)]
    steps: usize,
    /// Timed optimizer steps per optimizer (after `--warmup` untimed ones).
    #[arg(long, default_value_t = 50, value_parser = at_least_one::<usize>)]
    timed_steps: usize,
    /// Untimed steps first: kernels compile and tune in them.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Linear layers of the model (two parameter tensors each).
    #[arg(long, default_value_t = 12, value_parser = at_least_one::<usize>)]
    layers: usize,
    /// Width of the hidden layers.
    #[arg(long, default_value_t = 64, value_parser = at_least_one::<usize>)]
    width: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = 128, value_parser = at_least_one::<usize>)]
    batch_size: usize,
    /// f32, f16 (f16-mixed) or bf16 (bf16-mixed).
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Global-norm clipping threshold (0: no clipping).
    #[arg(long, default_value_t = 1.0, value_parser = kiln_ml_examples::cli::non_negative_finite)]
    max_norm: f64,
    /// Learning rate (constant).
    #[arg(long, default_value_t = 1e-3, value_parser = kiln_ml_examples::cli::positive_finite)]
    lr: f64,
    /// Alternating runs of the profiler-overhead measure, per side.
    #[arg(long, default_value_t = 5, value_parser = at_least_one::<usize>)]
    overhead_rounds: usize,
    /// Optimizer steps per run of the profiler-overhead measure (the cheap timer's period, 200,
    /// puts exactly one accurate step in each run of 200).
    #[arg(long, default_value_t = 200, value_parser = at_least_one::<usize>)]
    overhead_steps: usize,
    /// Internal: count kernel launches only and write them to this file (the child process).
    #[arg(long, hide = true, value_name = "PATH")]
    count_launches: Option<PathBuf>,
    #[command(flatten)]
    device: kiln_ml_examples::cli::DeviceChoice,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// Which optimizer a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Burn's `Adam`: an update per parameter tensor, clipped tensor by tensor.
    Burn,
    /// kiln-ml-train's `FusedAdam`.
    Kiln,
}

/// The launches the child process counted.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LaunchCounts {
    burn_per_step: f64,
    kiln_per_step: f64,
    /// The most launched kernels of a kiln step, with launches per step.
    kiln_top: Vec<(String, f64)>,
    /// The same for Burn's.
    burn_top: Vec<(String, f64)>,
}

/// Everything measured in the parent process.
struct Figures {
    param_tensors: usize,
    max_abs_param_diff: f64,
    burn_optimizer_ms: f64,
    kiln_optimizer_ms: f64,
    burn_step_ms: f64,
    kiln_step_ms: f64,
    syncs_per_step: f64,
    lagged_waits_per_step: f64,
    step_ms_no_profiler: f64,
    step_ms_cheap_profiler: f64,
    /// The median of the rounds' cheap-over-plain ratios.
    profiler_cheap_overhead: f64,
}

fn config(args: &Args) -> TrainerConfig {
    let clipping = (args.max_norm > 0.0).then_some(GradientClipping::Norm {
        max_norm: args.max_norm,
    });
    TrainerConfig::new()
        .with_precision(args.precision)
        .with_clipping(clipping)
        .with_seed(7)
}

fn model<B: Backend>(args: &Args, device: &B::Device) -> Mlp<B> {
    let hidden = vec![args.width; args.layers.saturating_sub(1)];
    MlpConfig::new(TEACHER_INPUTS, &hidden, 1)
        .with_seed(11)
        .init(device)
}

/// The trainers this example runs: kiln's on the testkit's MLP, a constant learning rate.
type MlpTrainer<B, O> = Trainer<B, Mlp<B>, O, f64>;

/// A trainer with Burn's `Adam` on a fresh model.
fn burn_trainer<B: AutodiffBackend>(
    args: &Args,
    device: &B::Device,
) -> anyhow::Result<MlpTrainer<B, impl Optimizer<Mlp<B>, B>>> {
    let optimizer = AdamConfig::new().init();
    Ok(Trainer::new(
        model::<B>(args, device),
        optimizer,
        args.lr,
        config(args),
        device.clone(),
    )?)
}

/// A trainer with kiln's `FusedAdam` on a fresh model.
fn kiln_trainer<B: AutodiffBackend>(
    args: &Args,
    device: &B::Device,
) -> anyhow::Result<MlpTrainer<B, FusedAdam<B>>> {
    let optimizer = FusedAdamConfig::adam().init();
    Ok(Trainer::new(
        model::<B>(args, device),
        optimizer,
        args.lr,
        config(args),
        device.clone(),
    )?)
}

/// Runs `body` on a trainer with the optimizer of `kind`: one generic body for both.
trait WithTrainer<B: AutodiffBackend> {
    type Output;
    fn run<O: Optimizer<Mlp<B>, B>>(
        self,
        trainer: MlpTrainer<B, O>,
    ) -> anyhow::Result<Self::Output>;
}

fn with_trainer<B: AutodiffBackend, W: WithTrainer<B>>(
    args: &Args,
    kind: Kind,
    device: &B::Device,
    body: W,
) -> anyhow::Result<W::Output> {
    match kind {
        Kind::Burn => body.run(burn_trainer::<B>(args, device)?),
        Kind::Kiln => body.run(kiln_trainer::<B>(args, device)?),
    }
}

/// Trains `steps` steps on `batches` (cycled), one micro-batch per step.
fn train<B, O>(
    trainer: &mut MlpTrainer<B, O>,
    batches: &[RegressionBatch<B>],
    steps: usize,
) -> anyhow::Result<()>
where
    B: AutodiffBackend,
    O: Optimizer<Mlp<B>, B>,
{
    for batch in batches.iter().cycle().take(steps) {
        trainer.train_batch(batch.clone())?;
    }
    Ok(())
}

fn sync<B: Backend>(device: &B::Device) -> anyhow::Result<()> {
    B::sync(device).map_err(|error| anyhow::anyhow!("device sync: {error:?}"))
}

/// The parameters after `steps` steps.
struct Parity<'a, B: AutodiffBackend> {
    batches: &'a [RegressionBatch<B>],
    steps: usize,
}

impl<B: AutodiffBackend> WithTrainer<B> for Parity<'_, B> {
    type Output = Vec<f32>;
    fn run<O: Optimizer<Mlp<B>, B>>(
        self,
        mut trainer: MlpTrainer<B, O>,
    ) -> anyhow::Result<Vec<f32>> {
        train(&mut trainer, self.batches, self.steps)?;
        Ok(trainer.model().valid().params())
    }
}

/// Rounds the phase times alternate between the two optimizers.
const PHASE_TIME_ROUNDS: usize = 5;

/// The optimizer phase's mean device time and the step's, in ms, with a sync at every phase.
struct PhaseTimes {
    burn_optimizer_ms: f64,
    burn_step_ms: f64,
    kiln_optimizer_ms: f64,
    kiln_step_ms: f64,
}

/// Times both optimizers' phases in alternating rounds of steps (the machine's load falls on
/// both alike), after a warm-up of each.
fn phase_times<B: AutodiffBackend>(
    args: &Args,
    batches: &[RegressionBatch<B>],
    device: &B::Device,
) -> anyhow::Result<PhaseTimes> {
    let new_timer = || Arc::new(PhaseTimer::new(Clock::start(), TimingMode::Accurate));
    let (burn_timer, kiln_timer) = (new_timer(), new_timer());
    let mut burn = burn_trainer::<B>(args, device)?;
    let mut kiln = kiln_trainer::<B>(args, device)?;
    train(&mut burn, batches, args.warmup)?;
    train(&mut kiln, batches, args.warmup)?;
    sync::<B>(device)?;
    burn.add_observer(Arc::clone(&burn_timer));
    kiln.add_observer(Arc::clone(&kiln_timer));
    let per_round = args.timed_steps.div_ceil(PHASE_TIME_ROUNDS);
    for _ in 0..PHASE_TIME_ROUNDS {
        train(&mut burn, batches, per_round)?;
        train(&mut kiln, batches, per_round)?;
    }
    let mean_ms = |timer: &PhaseTimer, name: &str| {
        timer
            .report()
            .row(name)
            .map(|row| row.mean_seconds * 1e3)
            .with_context(|| format!("the phase timer saw no {name} phase"))
    };
    Ok(PhaseTimes {
        burn_optimizer_ms: mean_ms(&burn_timer, "optimizer")?,
        burn_step_ms: mean_ms(&burn_timer, "step")?,
        kiln_optimizer_ms: mean_ms(&kiln_timer, "optimizer")?,
        kiln_step_ms: mean_ms(&kiln_timer, "step")?,
    })
}

/// Launches per step, counted from CubeCL's launch log.
struct CountLaunches<'a, B: AutodiffBackend> {
    batches: &'a [RegressionBatch<B>],
    warmup: usize,
    steps: usize,
    log: &'a mut LaunchLog,
}

impl<B: AutodiffBackend> WithTrainer<B> for CountLaunches<'_, B> {
    type Output = (f64, Vec<(String, f64)>);
    fn run<O: Optimizer<Mlp<B>, B>>(
        self,
        mut trainer: MlpTrainer<B, O>,
    ) -> anyhow::Result<Self::Output> {
        train(&mut trainer, self.batches, self.warmup)?;
        sync::<B>(trainer.device())?;
        self.log.mark()?;
        train(&mut trainer, self.batches, self.steps)?;
        sync::<B>(trainer.device())?;
        let launches = self.log.count_since_mark()?;
        let per_step = |count: u64| count as f64 / self.steps as f64;
        let top = launches
            .by_kernel
            .iter()
            .take(8)
            .map(|(name, count)| (name.clone(), per_step(*count)))
            .collect();
        Ok((per_step(launches.count), top))
    }
}

struct Measure {
    args: Args,
}

impl BackendTask for Measure {
    type Output = anyhow::Result<Figures>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<Figures> {
        let args = &self.args;
        let batches = teacher_batches::<B>(16, args.batch_size, 3, &device);
        // Each linear layer has a weight and a bias.
        let param_tensors = model::<B>(args, &device).layers.len() * 2;

        println!("parity: {} steps with each optimizer", args.steps);
        let parity = |kind| {
            let body = Parity {
                batches: &batches,
                steps: args.steps,
            };
            with_trainer::<B, _>(args, kind, &device, body)
        };
        let burn_params = parity(Kind::Burn)?;
        let kiln_params = parity(Kind::Kiln)?;
        let max_abs_param_diff =
            kiln_ml_examples::compare::max_abs_diff(&burn_params, &kiln_params);

        println!(
            "phase times: {} timed steps each, in {PHASE_TIME_ROUNDS} alternating rounds",
            args.timed_steps.div_ceil(PHASE_TIME_ROUNDS) * PHASE_TIME_ROUNDS
        );
        let times = phase_times::<B>(args, &batches, &device)?;

        println!(
            "syncs and the cheap profiler's cost: {} rounds of {} steps",
            args.overhead_rounds, args.overhead_steps
        );
        let overhead = overhead::<B>(args, &batches, &device)?;
        Ok(Figures {
            param_tensors,
            max_abs_param_diff,
            burn_optimizer_ms: times.burn_optimizer_ms,
            kiln_optimizer_ms: times.kiln_optimizer_ms,
            burn_step_ms: times.burn_step_ms,
            kiln_step_ms: times.kiln_step_ms,
            syncs_per_step: overhead.syncs_per_step,
            lagged_waits_per_step: overhead.lagged_waits_per_step,
            step_ms_no_profiler: overhead.plain_ms,
            step_ms_cheap_profiler: overhead.cheap_ms,
            profiler_cheap_overhead: overhead.ratio,
        })
    }
}

/// Step times with and without the cheap profiler, and the syncs of the run without.
struct Overhead {
    plain_ms: f64,
    cheap_ms: f64,
    /// The median over rounds of each round's cheap time over its plain time.
    ratio: f64,
    syncs_per_step: f64,
    lagged_waits_per_step: f64,
}

/// Two trainers with kiln's optimizer, one with the cheap phase timer: warmed up, then timed in
/// alternating runs (the machine's noise falls on both); the medians per step, and the median of
/// each round's ratio (a pair of runs next to each other in time shares the machine's load).
fn overhead<B: AutodiffBackend>(
    args: &Args,
    batches: &[RegressionBatch<B>],
    device: &B::Device,
) -> anyhow::Result<Overhead> {
    let mut plain = kiln_trainer::<B>(args, device)?;
    let mut cheap = kiln_trainer::<B>(args, device)?;
    cheap.add_observer(Arc::new(PhaseTimer::new(Clock::start(), TimingMode::CHEAP)));
    train(&mut plain, batches, args.warmup)?;
    train(&mut cheap, batches, args.warmup)?;
    sync::<B>(device)?;
    let before = plain.counters();
    let (mut plain_ms, mut cheap_ms) = (Vec::new(), Vec::new());
    let steps = args.overhead_steps.max(1);
    for _ in 0..args.overhead_rounds.max(1) {
        for (trainer, times) in [(&mut plain, &mut plain_ms), (&mut cheap, &mut cheap_ms)] {
            let started = Instant::now();
            train(trainer, batches, steps)?;
            sync::<B>(device)?;
            times.push(started.elapsed().as_secs_f64() * 1e3 / steps as f64);
        }
    }
    let mut ratios: Vec<f64> = cheap_ms.iter().zip(&plain_ms).map(|(c, p)| c / p).collect();
    let after = plain.counters();
    let counted_steps = (after.optimizer_steps - before.optimizer_steps).max(1) as f64;
    Ok(Overhead {
        plain_ms: median(&mut plain_ms),
        cheap_ms: median(&mut cheap_ms),
        ratio: median(&mut ratios),
        syncs_per_step: (after.readbacks - before.readbacks) as f64 / counted_steps,
        lagged_waits_per_step: (after.lagged_waits - before.lagged_waits) as f64 / counted_steps,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The child process: launches per step with each optimizer.
struct Count {
    args: Args,
    log: PathBuf,
}

impl BackendTask for Count {
    type Output = anyhow::Result<LaunchCounts>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<LaunchCounts> {
        let args = &self.args;
        let batches = teacher_batches::<B>(16, args.batch_size, 3, &device);
        let mut log = LaunchLog::new(&self.log);
        let mut count = |kind| {
            let body = CountLaunches {
                batches: &batches,
                warmup: args.warmup,
                steps: 10,
                log: &mut log,
            };
            with_trainer::<B, _>(args, kind, &device, body)
        };
        let (burn_per_step, burn_top) = count(Kind::Burn)?;
        let (kiln_per_step, kiln_top) = count(Kind::Kiln)?;
        Ok(LaunchCounts {
            burn_per_step,
            kiln_per_step,
            kiln_top,
            burn_top,
        })
    }
}

/// Counts launches in a child process of this binary with CubeCL's launch log on.
fn count_in_child() -> anyhow::Result<LaunchCounts> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("launches.json");
    // The parent's arguments without its `--json PATH`.
    let mut forwarded: Vec<std::ffi::OsString> = Vec::new();
    let mut skip_next = false;
    for arg in std::env::args_os().skip(1) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if arg == "--json" {
            skip_next = true;
            continue;
        }
        if arg.to_string_lossy().starts_with("--json=") {
            continue;
        }
        forwarded.push(arg);
    }
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.args(forwarded).arg("--count-launches").arg(&out);
    let status = command
        .status()
        .context("starting the launch-counting child")?;
    ensure!(
        status.success(),
        "the launch-counting child failed: {status}"
    );
    let text = std::fs::read_to_string(&out)
        .with_context(|| format!("reading the child's counts from {}", out.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn child(args: &Args, out: &PathBuf) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("launches.log");
    GpuTuning::from_env()?
        .with_launch_log(&log)
        .apply()
        .context("the launch log must be set before any GPU device exists")?;
    let selection = args.device.select()?;
    let counts = selection.run(Count {
        args: args.clone(),
        log,
    })?;
    std::fs::write(out, serde_json::to_string(&counts)?)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.layers >= 1, "--layers must be at least 1");
    ensure!(
        args.steps > 0 && args.timed_steps > 0,
        "--steps and --timed-steps must be > 0"
    );
    if let Some(out) = &args.count_launches {
        return child(&args, out);
    }
    let selection = args.device.select()?;
    println!("device: {selection}, precision {}", args.precision);
    let launches = match &selection {
        Selection::Cpu { .. } => {
            println!("flex launches no kernels: kernel counts are null");
            None
        }
        #[allow(unreachable_patterns)]
        _ => {
            println!("counting kernel launches in a child process (CubeCL's launch log)");
            Some(count_in_child()?)
        }
    };
    let figures = selection.run(Measure { args: args.clone() })?;

    let ratio = figures.burn_optimizer_ms / figures.kiln_optimizer_ms;
    let overhead = figures.profiler_cheap_overhead;
    println!(
        "model: {} parameter tensors; {} steps, precision {}",
        figures.param_tensors, args.steps, args.precision
    );
    println!(
        "optimizer phase: Burn's Adam {:.3} ms, kiln's fused Adam {:.3} ms ({ratio:.2}x); \
         whole step {:.3} ms against {:.3} ms",
        figures.burn_optimizer_ms,
        figures.kiln_optimizer_ms,
        figures.burn_step_ms,
        figures.kiln_step_ms
    );
    println!(
        "max |param diff| after {} steps: {:.3e}",
        args.steps, figures.max_abs_param_diff
    );
    if let Some(launches) = &launches {
        println!(
            "kernel launches per step: {:.1} with Burn's Adam, {:.1} with kiln's",
            launches.burn_per_step, launches.kiln_per_step
        );
        for (name, per_step) in &launches.kiln_top {
            println!("  kiln  {per_step:>6.1}  {name}");
        }
        for (name, per_step) in &launches.burn_top {
            println!("  burn  {per_step:>6.1}  {name}");
        }
    }
    println!(
        "syncs per step without a profiler: {:.2} (lagged waits {:.2}); step {:.3} ms, with the \
         cheap profiler {:.3} ms (median ratio {overhead:.3}x)",
        figures.syncs_per_step,
        figures.lagged_waits_per_step,
        figures.step_ms_no_profiler,
        figures.step_ms_cheap_profiler
    );

    let json = serde_json::json!({
        "device": selection.name(),
        "precision": args.precision.name(),
        "param_tensors": figures.param_tensors,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "width": args.width,
        "max_norm": args.max_norm,
        "burn_optimizer_ms": figures.burn_optimizer_ms,
        "kiln_optimizer_ms": figures.kiln_optimizer_ms,
        "optimizer_speedup": ratio,
        "burn_step_ms": figures.burn_step_ms,
        "kiln_step_ms": figures.kiln_step_ms,
        "max_abs_param_diff": figures.max_abs_param_diff,
        "kernels_per_step_before": launches.as_ref().map(|l| l.burn_per_step),
        "kernels_per_step_after": launches.as_ref().map(|l| l.kiln_per_step),
        "kernels_top_before": launches.as_ref().map(|l| l.burn_top.clone()),
        "kernels_top_after": launches.as_ref().map(|l| l.kiln_top.clone()),
        "syncs_per_step": figures.syncs_per_step,
        "lagged_waits_per_step": figures.lagged_waits_per_step,
        "step_ms_no_profiler": figures.step_ms_no_profiler,
        "step_ms_cheap_profiler": figures.step_ms_cheap_profiler,
        "profiler_cheap_overhead": overhead,
    });
    args.output.write(&json)?;
    Ok(())
}
