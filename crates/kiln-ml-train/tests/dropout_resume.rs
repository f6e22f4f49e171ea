//! Exact mid-epoch resume with dropout: under `reseed_every_step`, the dropout masks after a
//! resume are the ones the uninterrupted run drew.
//!
//! Dropout draws from the backend's global RNG, which every test thread of a binary shares, so
//! this check lives alone in its own test binary: in the trainer binary, other tests reseeding
//! the backend in parallel would change its masks.

use burn::backend::{Autodiff, Flex};
use burn::lr_scheduler::constant::ConstantLr;
use burn::optim::AdamConfig;
use burn::tensor::Tensor;
use kiln_ml_core::{Event, PlainBatches, Position, PositionedBatches};
use kiln_ml_testkit::{Mlp, MlpConfig, RecordingObserver, RegressionBatch as Batch};
use kiln_ml_train::{Preset, Trainer, TrainerConfig};
use std::sync::Arc;

type B = Autodiff<Flex>;

const INPUTS: usize = 6;
const HIDDEN: usize = 32;
const ROWS: usize = 8;
const BATCHES: usize = 5;

/// kiln-ml-testkit's MLP with dropout after its hidden layer.
fn model() -> Mlp<B> {
    MlpConfig::new(INPUTS, &[HIDDEN], 1)
        .with_dropout(0.5)
        .with_seed(3)
        .init(&Default::default())
}

/// Deterministic values in [-1, 1) without any RNG.
fn values(count: usize, salt: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 7919 + salt * 104_729) % 2000) as f32 / 1000.0 - 1.0)
        .collect()
}

fn batches() -> Vec<Batch<B>> {
    let device = &Default::default();
    (0..BATCHES)
        .map(|index| {
            Batch::from_rows(
                &values(ROWS * INPUTS, 10 + index),
                &values(ROWS, 20 + index),
                device,
            )
        })
        .collect()
}

fn trainer(
    config: TrainerConfig,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, ConstantLr> {
    Trainer::new(
        model(),
        AdamConfig::new().init(),
        ConstantLr::new(0.01),
        config,
        Default::default(),
    )
    .unwrap()
}

/// The epoch's batches (the same order every epoch), opened at `position`.
fn epoch_data(
    batches: &[Batch<B>],
    position: Position,
) -> kiln_ml_core::Result<impl PositionedBatches<Item = kiln_ml_core::Result<Batch<B>>>> {
    PlainBatches::new(batches.to_vec(), position, Batch::len)
}

fn config(seed: u64) -> TrainerConfig {
    Preset::Reproducible
        .config()
        .with_seed(seed)
        .with_num_epochs(2)
        .with_accumulation_steps(2)
}

/// The step losses of a run, as bits.
fn step_losses(
    trainer: &mut Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, ConstantLr>,
    position_data: &[Batch<B>],
) -> Vec<u64> {
    let recorder = Arc::new(RecordingObserver::new());
    trainer.add_observer(recorder.clone());
    trainer.fit(|p| epoch_data(position_data, p)).unwrap();
    recorder
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::Step(report) => Some(report.loss.expect("the preset reads the loss").to_bits()),
            _ => None,
        })
        .collect()
}

fn params(model: &Mlp<B>) -> Vec<u32> {
    model.params().into_iter().map(f32::to_bits).collect()
}

#[test]
fn dropout_masks_resume_exactly_under_reseed_every_step() {
    let device = Default::default();
    let data = batches();

    let mut whole = trainer(config(7));
    let whole_losses = step_losses(&mut whole, &data);
    assert_eq!(
        whole_losses.len(),
        6,
        "3 windows per epoch, the last partial"
    );

    // The masks matter: another seed draws other masks, so other losses.
    let mut reseeded = trainer(config(8));
    assert_ne!(step_losses(&mut reseeded, &data), whole_losses);

    // Interrupted after step 4 (mid-epoch 1), resumed from the checkpoint in a fresh trainer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dropout.kiln");
    let mut first = trainer(config(7).with_max_steps(Some(4)));
    let mut losses = step_losses(&mut first, &data);
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = trainer(config(7));
    let position = second.load_checkpoint(&path).unwrap();
    // Draws between loading and training must not matter: the next step reseeds.
    let _ = Tensor::<B, 1>::random([64], burn::tensor::Distribution::Default, &device);
    assert_eq!(
        position,
        Position {
            epoch: 1,
            consumed: 2 * ROWS as u64
        }
    );
    losses.extend(step_losses(&mut second, &data));
    assert_eq!(losses, whole_losses);
    assert_eq!(params(second.model()), params(whole.model()));

    // Without reseeding, the resumed steps draw other masks: what the option is for.
    let plain = |max_steps| {
        config(7)
            .with_reseed_every_step(false)
            .with_max_steps(max_steps)
    };
    let mut whole = trainer(plain(None));
    let whole_losses = step_losses(&mut whole, &data);
    let mut first = trainer(plain(Some(4)));
    let mut losses = step_losses(&mut first, &data);
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = trainer(plain(None));
    second.load_checkpoint(&path).unwrap();
    losses.extend(step_losses(&mut second, &data));
    assert_eq!(losses[..4], whole_losses[..4], "identical up to the cut");
    assert_ne!(losses[4..], whole_losses[4..], "other masks after it");
}
