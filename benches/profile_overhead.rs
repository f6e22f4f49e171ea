//! What profiling costs: kiln's `Trainer` alone, with kiln-ml-profile's `PhaseTimer` in cheap mode
//! (every phase of one step in 200 timed with syncs, the end of the step before it synced, none
//! between) and in accurate
//! mode (a sync at every phase), on the same model, data and optimizer.
//!
//! Criterion times one optimizer step of each; then an interleaved run (rounds of the three
//! variants in a rotating order) measures the ratios side by side, so load from other
//! processes hits all alike, and prints the median ratio of each variant to the trainer alone.
//! The target: cheap mode costs at most 1% of the step.
//!
//! The model is kiln-ml-testkit's MLP (256-512-512-16, seeded weights, batch 128, f32, Adam), on
//! flex, where a device sync is free: what is measured is the timer's own work (events, locks,
//! spans). On a GPU each sync also ends the step's overlap with the next one's host work, which
//! cheap mode pays twice per 200 steps; `step_overhead`'s `profiler_cheap_overhead` measures that.
//!
//! Run: `cargo bench --bench profile_overhead` (add `-- --quick` for a short run).

use std::sync::Arc;
use std::time::Duration;

use burn::optim::AdamConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use criterion::Criterion;
use kiln_ml::backend::CpuAutodiff;
use kiln_ml::profile::{Clock, PhaseTimer, TimingMode};
use kiln_ml::train::{Trainer, TrainerConfig, materialize};
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch as Batch};

#[path = "common/interleaved.rs"]
mod common;

type B = CpuAutodiff;
type KilnTrainer =
    Trainer<B, Mlp<B>, burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<B>, B>, f64>;

const NAMES: [&str; 3] = [
    "trainer_alone",
    "trainer_with_phase_timer_cheap",
    "trainer_with_phase_timer_accurate",
];

/// A trainer on the benchmark's model and batch, observed by a timer in `mode` if any.
fn variant(mode: Option<TimingMode>) -> (KilnTrainer, Batch<B>) {
    let device = Default::default();
    B::seed(&device, 1);
    let model = MlpConfig::new(256, &[512, 512], 16).init(&device);
    materialize(&model);
    let batch = Batch {
        inputs: Tensor::random([128, 256], Distribution::Normal(0.0, 1.0), &device),
        targets: Tensor::random([128, 16], Distribution::Normal(0.0, 1.0), &device),
    };
    let config = TrainerConfig::new().with_read_loss_every(1);
    let mut trainer = Trainer::new(model, AdamConfig::new().init(), 1e-4, config, device)
        .expect("a valid configuration");
    if let Some(mode) = mode {
        // The span limit keeps memory flat however long criterion runs.
        trainer.add_observer(Arc::new(
            PhaseTimer::new(Clock::start(), mode).with_max_spans(10_000),
        ));
    }
    (trainer, batch)
}

fn variants() -> [(KilnTrainer, Batch<B>); 3] {
    [
        variant(None),
        variant(Some(TimingMode::CHEAP)),
        variant(Some(TimingMode::Accurate)),
    ]
}

fn step((trainer, batch): &mut (KilnTrainer, Batch<B>)) -> f64 {
    trainer
        .train_batch(batch.clone())
        .expect("a clean step")
        .step
        .expect("K = 1 steps every batch")
        .loss
        .expect("read every step")
}

fn criterion_runs(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("profiled_train_step");
    for (name, mut variant) in NAMES.into_iter().zip(variants()) {
        group.bench_function(name, |bencher| bencher.iter(|| step(&mut variant)));
    }
    group.finish();
}

/// Rounds of `steps` steps of each variant in turn; median time ratio to the trainer alone.
fn interleaved(rounds: usize, steps: usize) {
    let mut variants = variants();
    let seconds = common::interleaved(&mut variants, step, rounds, steps);
    println!("\ninterleaved: {rounds} rounds of {steps} steps per variant");
    println!("| variant | median ms/step | ratio to the trainer alone |");
    println!("|---|---|---|");
    for (index, name) in NAMES.iter().enumerate() {
        println!(
            "| {name} | {:.3} | {:.4} |",
            1e3 * common::median(seconds[index].clone()),
            common::median_ratio(&seconds[index], &seconds[0])
        );
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8))
        .sample_size(30);
    criterion_runs(&mut criterion);
    let quick = std::env::args().any(|arg| arg == "--quick");
    interleaved(if quick { 5 } else { 60 }, 10);
    criterion.final_summary();
}
