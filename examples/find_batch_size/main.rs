//! The largest batch that fits, found with kiln-ml-profile's `BatchSizeFinder` under a memory
//! budget, and checked against the true maximum.
//!
//! Every trial runs full training steps (forward, backward, Adam's step, so the optimizer's
//! state is allocated) of an MLP on a fresh copy of the model, so the model is as it was
//! afterwards. The budget (`--budget-mb`) counts as the device's memory: a trial whose peak
//! exceeds it is out of memory. The peak comes from Burn's memory pool on wgpu and CUDA (what
//! the pool reserved) and from the process heap on the CPU (this program installs
//! kiln-ml-profile's counting allocator), so the finder works, and is checked, without a GPU.
//!
//! The true maximum is then established apart from the search: two trials measure how memory
//! grows with the batch, a prediction is bracketed and bisected to the exact boundary, and
//! trials at `true_max` (fits) and `true_max + 1` (does not) confirm it. The finder's answer
//! must lie within its margin of it.
//!
//! Run: `cargo run --release --example find_batch_size -- --help`

// How the true maximum is established apart from the search.
mod true_max;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure};
use burn::optim::AdamConfig;
use burn::tensor::backend::AutodiffBackend;
use clap::{Parser, ValueEnum};
use kiln_ml::backend::BackendTask;
use kiln_ml::profile::{BatchSizeFinder, FinderMode, MemoryProbe};
use kiln_ml::profile::{ChildCommand, FinderReport, Trial, serve_child_trial};
use kiln_ml::profile::{HeapProbe, PeakAlloc};
use kiln_ml::train::TrainerConfig;

use kiln_ml_examples::regressor::{Mlp, Row, batch_of, regressor};

/// Counts the heap: the CPU backend's "device memory".
#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc::new();

/// Find the largest batch size that fits a memory budget, and check it against the true
/// maximum.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// The memory budget, in MiB: a trial whose peak exceeds it is out of memory.
    #[arg(long, default_value_t = 48, value_parser = kiln_ml_examples::cli::at_least_one::<u64>)]
    budget_mb: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::CpuDeviceChoice,
    /// Search mode.
    #[arg(long, value_enum, default_value_t = Mode::Binsearch)]
    mode: Mode,
    /// Hidden width of the MLP.
    #[arg(long, default_value_t = 512, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    width: usize,
    /// Hidden layers of the MLP.
    #[arg(long, default_value_t = 3, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    depth: usize,
    /// Samples in the dataset: no batch is larger.
    #[arg(long, default_value_t = 8192, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    dataset_size: usize,
    /// Training steps per trial.
    #[arg(long, default_value_t = 3, value_parser = kiln_ml_examples::cli::at_least_one::<usize>)]
    steps_per_trial: usize,
    /// Run every trial in a fresh child process (this program, started again).
    #[arg(long)]
    child_process: bool,
    /// Skip establishing the true maximum (it costs a dozen more trials).
    #[arg(long)]
    no_true_max: bool,
    /// Seed of the weights.
    #[arg(long, default_value_t = 5)]
    seed: u64,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// The finder's modes, as command-line values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Double until out of memory (Lightning's `power`).
    Power,
    /// Double, then bisect, and keep a 5% margin (Lightning's `binsearch`).
    Binsearch,
    /// Shrink by 0.9 from a start (Accelerate's `find_executable_batch_size`).
    Shrink,
}

impl From<Mode> for FinderMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Power => FinderMode::Power,
            Mode::Binsearch => FinderMode::BinSearch,
            Mode::Shrink => FinderMode::Shrink,
        }
    }
}

/// What the search and the check found.
struct Outcome {
    search: FinderReport,
    true_max: Option<usize>,
    reference_trials: Vec<Trial>,
}

struct Find {
    args: Args,
    probe: Arc<dyn MemoryProbe>,
}

impl BackendTask for Find {
    type Output = anyhow::Result<Outcome>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<Outcome> {
        let args = &self.args;
        B::seed(&device, args.seed);
        let model = regressor::<B>(args.width, args.depth, args.seed, &device);
        let trial = |model: Mlp<B>, batch: usize, steps: usize| -> anyhow::Result<()> {
            train_steps::<B>(model, batch, steps, &device)
        };
        let mut finder = BatchSizeFinder::new(args.mode.into())
            .on_trial(print_trial)
            .steps_per_trial(args.steps_per_trial)
            .dataset_size(args.dataset_size)
            .probe(Arc::clone(&self.probe))
            .budget_bytes(args.budget_bytes());
        if args.mode == Mode::Shrink {
            // From the largest size down to 1 if need be: every trial but the last fails, and
            // 25 (the default) would stop 0.9^24 below the start, above the true maximum of a
            // small budget (648 from 8192).
            let start = args.dataset_size.min(8192);
            let to_one = ((start as f64).ln() / (1.0f64 / 0.9).ln()).ceil() as usize + 2;
            finder = finder.start(start).max_trials(to_one);
        }
        if args.child_process {
            finder = finder.child_process(ChildCommand::this_program()?);
        }
        let search = finder.run_restoring(&model, trial)?;
        let (true_max, reference_trials) = if args.no_true_max {
            (None, Vec::new())
        } else {
            let check = |size: usize| {
                finder.try_size(size, |batch, steps| trial(model.clone(), batch, steps))
            };
            true_max::true_maximum(args.dataset_size, args.budget_bytes(), check)?
        };
        Ok(Outcome {
            search,
            true_max,
            reference_trials,
        })
    }
}

/// One row of the trial table.
fn print_trial(trial: &Trial) {
    println!(
        "{:>8}  {:>5}  {:>12}  {:>8.2}  {}",
        trial.batch_size,
        if trial.fits { "yes" } else { "no" },
        trial.peak_bytes.map_or("-".to_owned(), |bytes| format!(
            "{:.1}",
            bytes as f64 / 1048576.0
        )),
        trial.seconds,
        trial.reason.as_deref().unwrap_or("")
    );
}

/// Builds a trainer around `model` and runs `steps` steps at batch size `batch`.
fn train_steps<B: AutodiffBackend>(
    model: Mlp<B>,
    batch: usize,
    steps: usize,
    device: &B::Device,
) -> anyhow::Result<()> {
    let mut trainer =
        TrainerConfig::new().init(model, AdamConfig::new().init(), 1e-3, device.clone())?;
    for step in 0..steps {
        let first = (step * batch) as u64;
        let rows: Vec<Row> = (first..first + batch as u64).map(Row::synthetic).collect();
        trainer.train_batch(batch_of(&rows, device))?;
    }
    // Waits for the device, so a failure inside the steps surfaces here.
    trainer.last_loss()?;
    Ok(())
}

const MIB: u64 = 1 << 20;

impl Args {
    /// `--budget-mb` in bytes (checked against overflow in `main`).
    fn budget_bytes(&self) -> u64 {
        self.budget_mb.saturating_mul(MIB)
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.budget_mb.checked_mul(MIB).is_some(),
        "--budget-mb {} is more bytes than 64 bits hold",
        args.budget_mb
    );
    let selection = args.device.select()?;
    let heap: Arc<dyn MemoryProbe> = Arc::new(HeapProbe::new(&ALLOCATOR));
    // Created on this thread, which trains: CubeCL keeps a pool per thread's stream.
    let probe = kiln_ml::profile::device_memory_probe(&selection).unwrap_or(heap);
    // A child started by the finder runs its one trial and exits here.
    if std::env::var_os(kiln_ml::profile::TRIAL_ENV).is_some() {
        let child = ChildTrial {
            args: args.clone(),
            probe: Arc::clone(&probe),
        };
        return selection.run(child);
    }
    println!("device     {selection}");
    println!("probe      {}", probe.name());
    println!("budget     {} MiB", args.budget_mb);
    let started = Instant::now();
    // Each trial is printed as it ends (the search's, then the true maximum's reference trials).
    println!(
        "{:>8}  {:>5}  {:>12}  {:>8}  reason",
        "batch", "fits", "peak MiB", "seconds"
    );
    let outcome = selection.run(Find {
        args: args.clone(),
        probe: Arc::clone(&probe),
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let search = &outcome.search;
    println!(
        "found      {} ({:?}; largest fitting {}, margin {:.0}%) in {} trials",
        search.found,
        search.mode,
        search.largest_fitting,
        100.0 * search.margin,
        search.trials.len()
    );
    let within_margin = outcome
        .true_max
        .map(|true_max| true_max::within_tolerance(search, true_max));
    match (outcome.true_max, within_margin) {
        (Some(true_max), Some(within)) => println!(
            "true max   {true_max} (confirmed by {} reference trials); found is {}within the \
             mode's tolerance ({})",
            outcome.reference_trials.len(),
            if within { "" } else { "NOT " },
            true_max::tolerance_text(search.mode)
        ),
        _ => println!("true max   not established"),
    }
    println!("done in {seconds:.1} s");
    if args.output.json.is_some() {
        let json = serde_json::json!({
            "device": selection.name(),
            "probe": probe.name(),
            "budget_bytes": args.budget_bytes(),
            "mode": search.mode,
            "found": search.found,
            "largest_fitting": search.largest_fitting,
            "true_max": outcome.true_max,
            "within_margin": within_margin,
            "margin": search.margin,
            "trials": search.trials,
            "reference_trials": outcome.reference_trials,
            "child_process": search.child_process,
            "seconds": seconds,
        });
        args.output.write(&json)?;
    }
    ensure!(
        within_margin != Some(false),
        "the finder's answer is not within its mode's tolerance of the true maximum"
    );
    Ok(())
}

/// The one trial a child process runs for a parent in `--child-process` mode.
struct ChildTrial {
    args: Args,
    probe: Arc<dyn MemoryProbe>,
}

impl BackendTask for ChildTrial {
    type Output = anyhow::Result<()>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> anyhow::Result<()> {
        B::seed(&device, self.args.seed);
        let model = regressor::<B>(self.args.width, self.args.depth, self.args.seed, &device);
        serve_child_trial(Some(self.probe.as_ref()), |batch, steps| {
            train_steps::<B>(model.clone(), batch, steps, &device)
        });
        bail!("serve_child_trial returned: the trial request was not in the environment")
    }
}
