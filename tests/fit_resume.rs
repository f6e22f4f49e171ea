//! Exact resume through `fit` over kiln-data epochs: the trainer saves the position the
//! loader's epoch reports, so a run interrupted mid-epoch, or right after an epoch's last batch,
//! continues bit for bit, with every end-of-epoch callback run exactly once.

use std::cell::RefCell;

use burn::optim::SgdConfig;
use kiln::backend::CpuAutodiff;
use kiln::core::{PlanRequest, Position, Sampler};
use kiln::data::{LoaderConfig, collate_fn};
use kiln::sampler::{BlockShuffleConfig, RemainderPolicy};
use kiln::train::{Trainer, TrainerConfig};
use kiln_testkit::{MemorySource, Mlp, MlpConfig, RegressionBatch, TEACHER_INPUTS};

type B = CpuAutodiff;

const BATCH: u64 = 4;
const EPOCHS: u64 = 3;

/// 40 samples in 3 files of uneven blocks: 10 batches per epoch.
fn source() -> MemorySource<u64> {
    MemorySource::with_ids(&[&[6, 6], &[10, 4], &[8, 6]])
}

/// Features and target of a sample, a pure function of its id.
fn row(id: u64) -> ([f32; TEACHER_INPUTS], f32) {
    let x = |k: u64| (((id * 7 + k * 13) % 17) as f32 / 8.5) - 1.0;
    let features = [x(0), x(1), x(2), x(3)];
    let target = 0.5 * features[0] - features[1] + 2.0 * features[2] + 0.25 * features[3];
    (features, target)
}

fn collate(ids: Vec<u64>) -> RegressionBatch<B> {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for id in ids {
        let (features, target) = row(id);
        inputs.extend(features);
        targets.push(target);
    }
    RegressionBatch::from_rows(&inputs, &targets, &Default::default())
}

fn trainer(
    config: TrainerConfig,
    seed: u64,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64> {
    let model = MlpConfig::new(TEACHER_INPUTS, &[8], 1)
        .with_seed(seed)
        .init(&Default::default());
    config
        .with_num_epochs(EPOCHS)
        .with_accumulation_steps(2)
        .with_read_loss_every(1)
        .init(model, SgdConfig::new().init(), 0.05, Default::default())
        .unwrap()
}

/// Trains with `fit_with` over the loader's epochs; returns the step losses and the epochs
/// whose end callback ran.
fn run(
    trainer: &mut Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64>,
) -> (Vec<u64>, Vec<u64>) {
    let loader = LoaderConfig::new()
        .with_workers(2)
        .init(source(), collate_fn(collate))
        .unwrap();
    let sampler = BlockShuffleConfig::default()
        .with_batch_size(BATCH)
        .with_remainder(RemainderPolicy::Drop)
        .init()
        .unwrap();
    let losses = RefCell::new(Vec::new());
    let ended = RefCell::new(Vec::new());
    trainer
        .fit_with(
            |position| {
                loader.resume_epoch(&sampler, &PlanRequest::new(9, position.epoch), position)
            },
            |trainer, epoch| {
                ended.borrow_mut().push(epoch.epoch);
                losses
                    .borrow_mut()
                    .push(trainer.last_loss()?.unwrap().to_bits());
                Ok(())
            },
        )
        .unwrap();
    let plan = sampler
        .plan(loader.source().as_ref(), &PlanRequest::new(9, 0))
        .unwrap();
    assert_eq!(
        plan.len() as u64,
        10 * BATCH,
        "the fixture has 10 batches per epoch"
    );
    (losses.into_inner(), ended.into_inner())
}

fn params(trainer: &Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64>) -> Vec<u32> {
    trainer
        .model()
        .params()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// Interrupted after `max_steps` optimizer steps, saved, resumed into fresh weights: the
/// epoch-end losses, the callbacks and the final parameters equal the uninterrupted run's.
fn resume_after(max_steps: u64, expected_position: Position) {
    let mut whole = trainer(TrainerConfig::new(), 1);
    let (whole_losses, whole_ended) = run(&mut whole);
    assert_eq!(whole_ended, [0, 1, 2]);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.kiln");
    let mut first = trainer(TrainerConfig::new().with_max_steps(Some(max_steps)), 1);
    let (mut losses, mut ended) = run(&mut first);
    assert_eq!(
        first.position(),
        expected_position,
        "the loader's position was saved"
    );
    first.save_checkpoint(&path).unwrap();
    drop(first);

    let mut second = trainer(TrainerConfig::new(), 99);
    assert_eq!(second.load_checkpoint(&path).unwrap(), expected_position);
    let (more_losses, more_ended) = run(&mut second);
    losses.extend(more_losses);
    ended.extend(more_ended);
    assert_eq!(ended, whole_ended, "each epoch ends once");
    assert_eq!(losses, whole_losses);
    assert_eq!(params(&second), params(&whole));
}

#[test]
fn fit_resumes_a_loader_epoch_mid_epoch_exactly() {
    // 5 steps per epoch (10 batches, 2 per step): step 7 ends after batch 4 of epoch 1.
    resume_after(
        7,
        Position {
            epoch: 1,
            consumed: 4 * BATCH,
        },
    );
}

#[test]
fn fit_resumes_after_an_epochs_last_batch_and_still_ends_that_epoch() {
    // Step 10 is the last of epoch 1: the loader already points at epoch 2's start, but epoch
    // 1's end (its callback) has not run yet when `max_steps` stops the run.
    resume_after(10, Position::start_of(2));
}
