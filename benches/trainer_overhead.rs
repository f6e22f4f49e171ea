//! Trainer overhead: kiln's `Trainer` against a hand-written Burn loop on the same model, data
//! and optimizer (f32, Adam, one loss readback per step in both).
//!
//! Four variants: the hand-written loop and the trainer (default settings, but reading the loss
//! back every step as the loop does: `read_loss_every = 1`), then both also
//! computing the global gradient norm each step. Criterion times one optimizer step of each;
//! then an interleaved run (rounds of A, B, C, D in a rotating order) measures the ratios side by side, so load
//! from other processes hits all variants alike, and prints the median ratio of each trainer
//! variant to the hand-written loop doing the same work.
//!
//! The model is kiln-ml-testkit's MLP (256-512-512-16, seeded weights), the one the trainer's
//! tests use.
//!
//! Run: `cargo bench --bench trainer_overhead` (add `-- --quick` for a short run).

use std::time::Duration;

use burn::nn::loss::{MseLoss, Reduction};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use criterion::Criterion;
use kiln_ml::backend::CpuAutodiff;
use kiln_ml::train::{Trainer, TrainerConfig, global_grad_norm, materialize};
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch as Batch};

#[path = "common/interleaved.rs"]
mod common;

type B = CpuAutodiff;

const INPUTS: usize = 256;
const HIDDEN: usize = 512;
const OUTPUTS: usize = 16;
const BATCH: usize = 128;
const LEARNING_RATE: f64 = 1e-4;

fn setup() -> (Mlp<B>, Batch<B>) {
    let device = Default::default();
    B::seed(&device, 1);
    let model = MlpConfig::new(INPUTS, &[HIDDEN, HIDDEN], OUTPUTS).init(&device);
    materialize(&model);
    let batch = Batch {
        inputs: Tensor::random([BATCH, INPUTS], Distribution::Normal(0.0, 1.0), &device),
        targets: Tensor::random([BATCH, OUTPUTS], Distribution::Normal(0.0, 1.0), &device),
    };
    (model, batch)
}

/// The loop a Burn user writes by hand: forward, loss, backward, optimizer step, read the loss;
/// optionally also the global gradient norm (for logging), as the trainer does on request.
struct HandWritten<O> {
    model: Option<Mlp<B>>,
    optim: O,
    batch: Batch<B>,
    grad_norm: bool,
}

impl<O: Optimizer<Mlp<B>, B>> HandWritten<O> {
    fn step(&mut self) -> f64 {
        let model = self.model.take().expect("present between steps");
        let predictions = model.forward(self.batch.inputs.clone());
        let loss = MseLoss::new().forward(predictions, self.batch.targets.clone(), Reduction::Mean);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        if self.grad_norm {
            std::hint::black_box(global_grad_norm::<B, _>(&model, &grads).expect("a norm"));
        }
        self.model = Some(self.optim.step(LEARNING_RATE, model, grads));
        loss.into_scalar() as f64
    }
}

/// One of the three loops under test.
enum Variant {
    Hand(Box<HandWritten<burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<B>, B>>>),
    Trainer(Box<(KilnTrainer, Batch<B>)>),
}

type KilnTrainer =
    Trainer<B, Mlp<B>, burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<B>, B>, f64>;

impl Variant {
    fn hand(grad_norm: bool) -> Self {
        let (model, batch) = setup();
        Variant::Hand(Box::new(HandWritten {
            model: Some(model),
            optim: AdamConfig::new().init(),
            batch,
            grad_norm,
        }))
    }

    fn trainer(track_grad_norm: bool) -> Self {
        let (model, batch) = setup();
        // The hand-written loop reads its loss back every step, so the trainer does too.
        let config = TrainerConfig::new()
            .with_track_grad_norm(track_grad_norm)
            .with_read_loss_every(1);
        let trainer = Trainer::new(
            model,
            AdamConfig::new().init(),
            LEARNING_RATE,
            config,
            Default::default(),
        )
        .expect("a valid configuration");
        Variant::Trainer(Box::new((trainer, batch)))
    }

    fn step(&mut self) -> f64 {
        match self {
            Variant::Hand(hand) => hand.step(),
            Variant::Trainer(state) => {
                let (trainer, batch) = &mut **state;
                trainer
                    .train_batch(batch.clone())
                    .expect("a clean step")
                    .step
                    .expect("K = 1 steps every batch")
                    .loss
                    .expect("read every step")
            }
        }
    }
}

const NAMES: [&str; 4] = [
    "hand_written_burn_loop",
    "kiln_trainer",
    "hand_written_with_grad_norm",
    "kiln_trainer_with_grad_norm",
];

fn variants() -> [Variant; 4] {
    [
        Variant::hand(false),
        Variant::trainer(false),
        Variant::hand(true),
        Variant::trainer(true),
    ]
}

fn criterion_runs(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("train_step");
    for (name, mut variant) in NAMES.into_iter().zip(variants()) {
        group.bench_function(name, |bencher| bencher.iter(|| variant.step()));
    }
    group.finish();
}

/// Rounds of `steps` steps of each variant in turn; median time ratio to the hand-written loop.
fn interleaved(rounds: usize, steps: usize) {
    let mut variants = variants();
    let seconds = common::interleaved(&mut variants, Variant::step, rounds, steps);
    println!("\ninterleaved: {rounds} rounds of {steps} steps per variant");
    println!("| variant | median ms/step | ratio to the hand-written loop doing the same work |");
    println!("|---|---|---|");
    for (index, name) in NAMES.iter().enumerate() {
        // Even indices are hand-written loops, odd ones the trainer doing the same work.
        let baseline = index - index % 2;
        println!(
            "| {name} | {:.3} | {:.3} |",
            1e3 * common::median(seconds[index].clone()),
            common::median_ratio(&seconds[index], &seconds[baseline])
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
