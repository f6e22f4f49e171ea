//! Exact resume through `fit` over kiln-ml-data epochs: the trainer saves the position the
//! loader's epoch reports, so a run interrupted mid-epoch, or right after an epoch's last batch,
//! continues bit for bit, with every end-of-epoch callback run exactly once; and a checkpoint
//! resumed onto other data is refused.

use std::cell::RefCell;

use burn::optim::SgdConfig;
use kiln_ml::backend::CpuAutodiff;
use kiln_ml::core::{PlanRequest, Position, Sampler};
use kiln_ml::data::{LoaderConfig, collate_fn};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy};
use kiln_ml::train::{Trainer, TrainerConfig};
use kiln_ml_testkit::{MemorySource, Mlp, MlpConfig, RegressionBatch, TEACHER_INPUTS};

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

/// The data of a run: the source, the seed and the batch size.
#[derive(Clone, Copy)]
struct Data {
    extra_file: bool,
    seed: u64,
    batch: u64,
}

const DATA: Data = Data {
    extra_file: false,
    seed: 9,
    batch: BATCH,
};

/// Trains with `fit_with` over the loader's epochs; returns the step losses and the epochs
/// whose end callback ran.
fn run(
    trainer: &mut Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64>,
) -> (Vec<u64>, Vec<u64>) {
    try_run(trainer, DATA).unwrap()
}

fn try_run(
    trainer: &mut Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64>,
    data: Data,
) -> Result<(Vec<u64>, Vec<u64>), kiln_ml::train::Error> {
    let source = if data.extra_file {
        MemorySource::with_ids(&[&[6, 6], &[10, 4], &[8, 6], &[4]])
    } else {
        source()
    };
    let loader = LoaderConfig::new()
        .with_workers(2)
        .init(source, collate_fn(collate))
        .unwrap();
    let sampler = BlockShuffleConfig::default()
        .with_batch_size(data.batch)
        .with_remainder(RemainderPolicy::Drop)
        .init()
        .unwrap();
    let losses = RefCell::new(Vec::new());
    let ended = RefCell::new(Vec::new());
    trainer.fit_with(
        |position| {
            let request = PlanRequest::new(data.seed, position.epoch);
            loader.resume_epoch(&sampler, &request, position)
        },
        |trainer, epoch| {
            ended.borrow_mut().push(epoch.epoch);
            losses
                .borrow_mut()
                .push(trainer.last_loss()?.unwrap().to_bits());
            Ok(())
        },
    )?;
    if !data.extra_file {
        let plan = sampler
            .plan(loader.source().as_ref(), &PlanRequest::new(data.seed, 0))
            .unwrap();
        let batches = plan.len() as u64 / data.batch;
        assert_eq!(
            batches,
            10 * BATCH / data.batch,
            "the fixture has 40 samples"
        );
    }
    Ok((losses.into_inner(), ended.into_inner()))
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

/// A checkpoint resumed onto other data (a file added, another seed, another batch size) is
/// refused by name, unless the run says it means it.
#[test]
fn fit_refuses_to_resume_onto_other_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.kiln");
    let mut first = trainer(TrainerConfig::new().with_max_steps(Some(7)), 1);
    run(&mut first);
    first.save_checkpoint(&path).unwrap();

    let changes = [
        Data {
            extra_file: true,
            ..DATA
        },
        Data { seed: 10, ..DATA },
        Data { batch: 2, ..DATA },
    ];
    for data in changes {
        let mut resumed = trainer(TrainerConfig::new(), 1);
        resumed.load_checkpoint(&path).unwrap();
        let error = try_run(&mut resumed, data).unwrap_err();
        assert!(
            matches!(error, kiln_ml::train::Error::DataChanged { epoch: 1, .. }),
            "{error}"
        );
        assert_eq!(resumed.counters().optimizer_steps, 7, "nothing trained");
    }
    // The same data resumes; other data resumes when asked to.
    let mut same = trainer(TrainerConfig::new(), 1);
    same.load_checkpoint(&path).unwrap();
    try_run(&mut same, DATA).unwrap();
    let mut forced = trainer(TrainerConfig::new().with_resume_on_changed_data(true), 1);
    forced.load_checkpoint(&path).unwrap();
    try_run(&mut forced, Data { seed: 10, ..DATA }).unwrap();
    assert!(forced.counters().optimizer_steps > 7);
}
