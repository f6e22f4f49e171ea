//! Checkpoints: resuming mid-epoch continues exactly as the uninterrupted run.

use std::path::Path;

use burn::lr_scheduler::linear::{LinearLrScheduler, LinearLrSchedulerConfig};
use burn::optim::AdamConfig;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Event, Position, PositionedBatches};
use kiln_ml_train::{Error, Preset, Trainer, TrainerConfig, latest_checkpoint};
use rand::Rng;

use crate::common::{self, Batch, Mlp};

const BATCHES: usize = 5;
const ROWS: usize = 4;

fn config() -> TrainerConfig {
    Preset::Reproducible
        .config()
        .with_num_epochs(3)
        .with_accumulation_steps(2)
}

fn trainer<B: AutodiffBackend>(
    device: &B::Device,
    config: TrainerConfig,
    weights_seed: u64,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, LinearLrScheduler> {
    let scheduler = LinearLrSchedulerConfig::new(0.05, 0.01, 6).init().unwrap();
    Trainer::new(
        common::model::<B>(device, weights_seed),
        AdamConfig::new().init(),
        scheduler,
        config,
        device.clone(),
    )
    .unwrap()
}

/// The epoch's batches (a different rotation each epoch), opened at `position`.
fn epoch_data<B: AutodiffBackend>(
    batches: &[Batch<B>],
    position: Position,
) -> kiln_ml_core::Result<impl PositionedBatches<Item = kiln_ml_core::Result<Batch<B>>>> {
    let mut order = batches.to_vec();
    order.rotate_left(position.epoch as usize % BATCHES);
    common::plain(order, position)
}

/// Fits on `batches` (rotated per epoch); returns the summary and how many epochs ended (the
/// end-of-epoch closure's calls).
fn fit_counting_epoch_ends<B: AutodiffBackend, O: burn::optim::Optimizer<Mlp<B>, B>>(
    trainer: &mut Trainer<B, Mlp<B>, O, LinearLrScheduler>,
    batches: &[Batch<B>],
) -> (kiln_ml_train::FitSummary, u32) {
    let mut ends = 0;
    let summary = trainer
        .fit_with(
            |p| epoch_data(batches, p),
            |_, _| {
                ends += 1;
                Ok(())
            },
        )
        .unwrap();
    (summary, ends)
}

fn loss_bits(reports: &[kiln_ml_core::StepReport]) -> Vec<u64> {
    reports
        .iter()
        .map(|report| report.loss.expect("the preset reads the loss").to_bits())
        .collect()
}

/// Bit-identical step losses, parameters and host RNG draws with and without an interruption
/// after step 4 (in the middle of epoch 1, between two accumulation windows).
fn resumed_run_is_bit_identical<B: AutodiffBackend>(device: B::Device) {
    resumed_run_matches::<B>(device, config());
}

/// The same under f16 mixed precision, with a loss scaler that grows every 2 clean steps, so
/// its scale and growth tracker change across the interruption and must come from the file.
fn resumed_f16_run_with_scaler_state_is_bit_identical<B: AutodiffBackend>(device: B::Device) {
    let mut f16 = config().with_precision(kiln_ml_train::Precision::F16Mixed);
    f16.loss_scaler.growth_interval = 2;
    resumed_run_matches::<B>(device, f16);
}

fn resumed_run_matches<B: AutodiffBackend>(device: B::Device, base: TrainerConfig) {
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let draw = |trainer: &mut Trainer<B, _, _, _>, draws: &mut Vec<u64>| {
        draws.push(trainer.rng().random::<u64>());
        Ok(())
    };

    let mut whole = trainer::<B>(&device, base.clone(), 1);
    let whole_steps = common::recorder();
    whole.add_observer(whole_steps.clone());
    let mut whole_draws = Vec::new();
    whole
        .fit_with(
            |p| epoch_data(&batches, p),
            |t, _| draw(t, &mut whole_draws),
        )
        .unwrap();
    assert_eq!(
        whole.counters().optimizer_steps,
        9,
        "3 windows per epoch, the last partial"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mid-epoch.kiln");
    let mut first = trainer::<B>(&device, base.clone().with_max_steps(Some(4)), 1);
    let first_steps = common::recorder();
    first.add_observer(first_steps.clone());
    let mut draws = Vec::new();
    let summary = first
        .fit_with(|p| epoch_data(&batches, p), |t, _| draw(t, &mut draws))
        .unwrap();
    assert!(summary.reached_max_steps);
    assert_eq!(
        summary.position,
        Position {
            epoch: 1,
            consumed: 2 * ROWS as u64
        }
    );
    first.save_checkpoint(&path).unwrap();
    drop(first);

    // Fresh weights and optimizer: everything must come from the checkpoint.
    let mut second = trainer::<B>(&device, base.clone(), 99);
    let second_steps = common::recorder();
    second.add_observer(second_steps.clone());
    let position = second.load_checkpoint(&path).unwrap();
    assert_eq!(position, summary.position);
    second
        .fit_with(|p| epoch_data(&batches, p), |t, _| draw(t, &mut draws))
        .unwrap();

    // The resumed trainer's observers hear the epoch it resumes in start, then the next.
    let started: Vec<u64> = second_steps
        .events()
        .iter()
        .filter_map(|event| match event {
            Event::EpochStart { epoch } => Some(*epoch),
            _ => None,
        })
        .collect();
    assert_eq!(started, [1, 2]);

    let mut resumed = common::step_reports(&first_steps);
    resumed.extend(common::step_reports(&second_steps));
    let whole_reports = common::step_reports(&whole_steps);
    assert_eq!(loss_bits(&resumed), loss_bits(&whole_reports));
    let scales = |reports: &[kiln_ml_core::StepReport]| -> Vec<Option<u64>> {
        reports
            .iter()
            .map(|r| r.loss_scale.map(f64::to_bits))
            .collect()
    };
    assert_eq!(
        scales(&resumed),
        scales(&whole_reports),
        "the loss scale resumes"
    );
    if base.precision == kiln_ml_train::Precision::F16Mixed {
        // The scale must actually move after the cut, or the test proves nothing about it.
        let after_cut = scales(&whole_reports)[4..].to_vec();
        assert!(
            after_cut.windows(2).any(|pair| pair[0] != pair[1]),
            "{after_cut:?}"
        );
    }
    let rates: Vec<f64> = resumed.iter().map(|r| r.learning_rate).collect();
    let whole_rates: Vec<f64> = whole_reports.iter().map(|r| r.learning_rate).collect();
    assert_eq!(rates, whole_rates, "the scheduler resumes where it was");
    let bits = |model: &Mlp<B>| -> Vec<u32> {
        common::params(model).iter().map(|v| v.to_bits()).collect()
    };
    assert_eq!(bits(second.model()), bits(whole.model()));
    assert_eq!(draws, whole_draws, "the host RNG resumes where it was");
    assert_eq!(second.counters(), whole.counters());
}

/// `fit` writes checkpoints every N steps and at epoch ends, keeping the newest few, and a
/// trainer resumed from the latest one finishes with the same parameters.
fn fit_checkpoints_rotate_and_resume<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = kiln_ml_train::CheckpointConfig::new(dir.path())
        .with_every_steps(2)
        .with_keep_last(2);
    let mut run = trainer::<B>(&device, config().with_checkpoint(Some(checkpoints)), 1);
    run.fit(|p| epoch_data(&batches, p)).unwrap();
    let files = kiln_ml_train::list_checkpoints(dir.path()).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    let latest = latest_checkpoint(dir.path()).unwrap().unwrap();
    assert!(latest.ends_with("step-000000000009.kiln"), "{latest:?}");

    let mut resumed = trainer::<B>(&device, config(), 5);
    let position = resumed.load_checkpoint(&latest).unwrap();
    assert_eq!(position, Position::start_of(3));
    let summary = resumed.fit(|p| epoch_data(&batches, p)).unwrap();
    assert_eq!(summary.counters.optimizer_steps, 9, "nothing left to train");
    assert_eq!(common::params(resumed.model()), common::params(run.model()));

    // The older file (step 8, mid-epoch 2) resumes with training left to do.
    let older = files
        .iter()
        .find(|path| path.ends_with("step-000000000008.kiln"))
        .expect("the step-8 checkpoint is kept");
    let mut resumed = trainer::<B>(&device, config(), 5);
    let position = resumed.load_checkpoint(older).unwrap();
    assert_eq!(
        position,
        Position {
            epoch: 2,
            consumed: 4 * ROWS as u64
        }
    );
    let summary = resumed.fit(|p| epoch_data(&batches, p)).unwrap();
    assert_eq!(
        summary.counters.optimizer_steps, 9,
        "one step left to train"
    );
    let bits = |values: Vec<f32>| -> Vec<u32> { values.iter().map(|v| v.to_bits()).collect() };
    assert_eq!(
        bits(common::params(resumed.model())),
        bits(common::params(run.model()))
    );
}

/// A run stopped by `max_steps` in the middle of an epoch leaves that step's checkpoint,
/// though its schedule (epoch ends only) would not write one there; it resumes from it.
#[test]
fn a_run_stopped_by_max_steps_leaves_its_checkpoint() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let dir = tempfile::tempdir().unwrap();
    let at_epoch_ends = kiln_ml_train::CheckpointConfig::new(dir.path());
    let stopping = config()
        .with_checkpoint(Some(at_epoch_ends))
        .with_max_steps(Some(4));
    let mut run = trainer::<B>(&device, stopping, 1);
    assert!(
        run.fit(|p| epoch_data(&batches, p))
            .unwrap()
            .reached_max_steps
    );
    let names: Vec<String> = kiln_ml_train::list_checkpoints(dir.path())
        .unwrap()
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // Three optimizer steps an epoch: epoch 0's end, then the stop one step into epoch 1.
    assert_eq!(names, ["step-000000000003.kiln", "step-000000000004.kiln"]);
    let mut resumed = trainer::<B>(&device, config(), 5);
    let latest = latest_checkpoint(dir.path()).unwrap().unwrap();
    assert_eq!(
        resumed.load_checkpoint(&latest).unwrap(),
        Position {
            epoch: 1,
            consumed: 2 * ROWS as u64
        }
    );
}

/// Steps an epoch's end flushes count for `every_steps` like any other: with 3 steps an epoch,
/// the last of each made by the flush, every third step is one of them.
#[test]
fn every_steps_counts_the_steps_an_epoch_end_flushes() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let dir = tempfile::tempdir().unwrap();
    let mut checkpoints = kiln_ml_train::CheckpointConfig::new(dir.path())
        .with_every_steps(3)
        .with_keep_last(10);
    checkpoints.at_epoch_end = false;
    let mut run = trainer::<B>(&device, config().with_checkpoint(Some(checkpoints)), 1);
    run.fit(|p| epoch_data(&batches, p)).unwrap();
    let names: Vec<String> = kiln_ml_train::list_checkpoints(dir.path())
        .unwrap()
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [3, 6, 9].map(|step| format!("step-{step:012}.kiln")),
        "{names:?}"
    );
    // Saved before the epoch closed: a resume from step 3 runs epoch 0's end, then the rest.
    let mut resumed = trainer::<B>(&device, config(), 5);
    resumed
        .load_checkpoint(&dir.path().join("step-000000000003.kiln"))
        .unwrap();
    let (_, ends) = fit_counting_epoch_ends(&mut resumed, &batches);
    assert_eq!(ends, 3, "epoch 0's end and epochs 1 and 2");
    assert_eq!(common::params(resumed.model()), common::params(run.model()));
}

/// With step and epoch-end checkpoints both on, an epoch whose last step the schedule saves
/// is saved once, before its end (as Lightning skips a step already saved), whether that step
/// is a full window or the flushed last one; a resume from it runs the epoch's end again and
/// finishes as the uninterrupted run.
#[test]
fn an_epoch_end_does_not_save_a_step_already_saved_again() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    // Accumulation 1: 5 steps an epoch, the last a full window. Accumulation 2: 3 steps an
    // epoch, the last made by the flush.
    for (accumulation, steps_per_epoch) in [(1, 5), (2, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let checkpoints = kiln_ml_train::CheckpointConfig::new(dir.path())
            .with_every_steps(steps_per_epoch)
            .with_keep_last(10);
        let config = config().with_accumulation_steps(accumulation);
        let mut run = trainer::<B>(
            &device,
            config.clone().with_checkpoint(Some(checkpoints)),
            1,
        );
        let recorder = common::recorder();
        run.add_observer(recorder.clone());
        run.fit(|p| epoch_data(&batches, p)).unwrap();
        let saved = common::saved_checkpoint_steps(&recorder);
        let each_epoch = [1, 2, 3].map(|epoch| epoch * steps_per_epoch);
        assert_eq!(saved, each_epoch, "accumulation {accumulation}");
        // Saved before epoch 0 closed: the resume runs its end, then epochs 1 and 2.
        let first = dir.path().join(format!("step-{steps_per_epoch:012}.kiln"));
        let mut resumed = trainer::<B>(&device, config, 5);
        resumed.load_checkpoint(&first).unwrap();
        let (_, ends) = fit_counting_epoch_ends(&mut resumed, &batches);
        assert_eq!(
            ends, 3,
            "accumulation {accumulation}: epoch 0's end and epochs 1 and 2"
        );
        assert_eq!(common::params(resumed.model()), common::params(run.model()));
    }
}

/// An epoch that makes no optimizer step (its data is empty) still writes its epoch-end
/// checkpoint, though the step it holds was saved before: that file is another epoch's.
#[test]
fn an_epoch_without_steps_still_writes_its_checkpoint() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = kiln_ml_train::CheckpointConfig::new(dir.path()).with_every_steps(3);
    let mut run = trainer::<B>(&device, config().with_checkpoint(Some(checkpoints)), 1);
    let recorder = common::recorder();
    run.add_observer(recorder.clone());
    // Epoch 0 makes 3 steps (the last saved before its end); epochs 1 and 2 have no batches.
    run.fit(|p| {
        let epoch_batches = if p.epoch == 0 {
            batches.clone()
        } else {
            Vec::new()
        };
        common::plain(epoch_batches, p)
    })
    .unwrap();
    assert_eq!(common::saved_checkpoint_steps(&recorder), [3, 3, 3]);
    let mut resumed = trainer::<B>(&device, config(), 5);
    let latest = latest_checkpoint(dir.path()).unwrap().unwrap();
    assert_eq!(
        resumed.load_checkpoint(&latest).unwrap(),
        Position::start_of(3)
    );
}

/// `max_steps` on an epoch's last step, which `every_steps` saves before the epoch's end: a
/// resume from that file with the same limit still runs the epoch's end, as the run that wrote
/// it did, and trains nothing more.
#[test]
fn a_resume_at_max_steps_runs_the_end_of_an_epoch_saved_before_it() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints =
        kiln_ml_train::CheckpointConfig::new(dir.path()).with_every_steps(BATCHES as u64);
    let config = config()
        .with_accumulation_steps(1)
        .with_max_steps(Some(BATCHES as u64))
        .with_checkpoint(Some(checkpoints));
    let mut run = trainer::<B>(&device, config.clone(), 1);
    let (summary, ends) = fit_counting_epoch_ends(&mut run, &batches);
    assert!(summary.reached_max_steps);
    assert_eq!(ends, 1);
    let latest = latest_checkpoint(dir.path()).unwrap().unwrap();
    assert!(
        latest.ends_with(format!("step-{BATCHES:012}.kiln")),
        "{latest:?}"
    );
    let mut resumed = trainer::<B>(&device, config, 5);
    resumed.load_checkpoint(&latest).unwrap();
    let (summary, ends) = fit_counting_epoch_ends(&mut resumed, &batches);
    assert!(summary.reached_max_steps);
    assert_eq!(ends, 1, "epoch 0's end, run again");
    assert_eq!(summary.counters.optimizer_steps, BATCHES as u64);
    assert_eq!(common::params(resumed.model()), common::params(run.model()));
}

/// `max_steps` reached on an epoch's last batch still ends that epoch: its end-of-epoch
/// closure runs, as Lightning validates on the last batch.
#[test]
fn max_steps_on_an_epochs_last_batch_still_ends_the_epoch() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let stopping = config()
        .with_accumulation_steps(1)
        .with_max_steps(Some(BATCHES as u64));
    let mut run = trainer::<B>(&device, stopping, 1);
    let recorder = common::recorder();
    run.add_observer(recorder.clone());
    let (summary, ends) = fit_counting_epoch_ends(&mut run, &batches);
    assert!(summary.reached_max_steps);
    assert_eq!(ends, 1);
    assert_eq!(run.epoch(), 1);
    assert!(
        recorder
            .events()
            .iter()
            .any(|event| matches!(event, Event::EpochEnd { epoch: 0, .. }))
    );
    // One step short of the epoch's end, it stops inside the epoch, as before.
    let mut short = trainer::<B>(
        &device,
        config()
            .with_accumulation_steps(1)
            .with_max_steps(Some(BATCHES as u64 - 1)),
        1,
    );
    let (_, ends) = fit_counting_epoch_ends(&mut short, &batches);
    assert_eq!((ends, short.epoch()), (0, 0));
}

/// A trainer rolled back with `load_checkpoint` sets the abandoned trajectory's later files aside
/// when `fit` starts: a run that dies before its first checkpoint resumes from the file it
/// rolled back to, and its checkpoint of a step it wrote before the rollback does not replace
/// the abandoned one (it used to).
#[test]
fn a_rolled_back_trainer_writes_the_steps_it_wrote_before() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(BATCHES, ROWS, 17, &device);
    let other = common::batches::<B>(BATCHES, ROWS, 99, &device);
    let dir = tempfile::tempdir().unwrap();
    let at_epoch_ends = kiln_ml_train::CheckpointConfig::new(dir.path()).with_keep_last(10);
    let stopping = config()
        .with_checkpoint(Some(at_epoch_ends))
        .with_max_steps(Some(4));
    let mut run = trainer::<B>(&device, stopping, 1);
    run.fit(|p| epoch_data(&batches, p)).unwrap();
    let abandoned_step_4 = std::fs::read(dir.path().join("step-000000000004.kiln")).unwrap();
    let rolled_back_to = dir.path().join("step-000000000003.kiln");
    run.load_checkpoint(&rolled_back_to).unwrap();
    // The rolled-back run dies at its first batch, before it writes anything.
    let dies = true;
    run.fit(|p| {
        epoch_data(&other, p).and_then(|data| {
            if dies {
                Err(kiln_ml_core::Error::InvalidConfig(
                    "the process died".to_owned(),
                ))
            } else {
                Ok(data)
            }
        })
    })
    .unwrap_err();
    assert_eq!(
        latest_checkpoint(dir.path()).unwrap(),
        Some(rolled_back_to.clone())
    );
    run.load_checkpoint(&rolled_back_to).unwrap();
    let recorder = common::recorder();
    run.add_observer(recorder.clone());
    run.fit(|p| epoch_data(&other, p)).unwrap();
    assert!(
        recorder
            .events()
            .iter()
            .any(|event| matches!(event, Event::CheckpointSaved { step: 4, .. })),
        "step 4 of the new trajectory is saved"
    );
    let set_aside = dir.path().join("step-000000000004.kiln.abandoned");
    assert_eq!(std::fs::read(set_aside).unwrap(), abandoned_step_4);
    assert_ne!(
        std::fs::read(dir.path().join("step-000000000004.kiln")).unwrap(),
        abandoned_step_4
    );
}

/// Under mixed precision, which modules stay in f32 changes the numbers: a checkpoint is
/// refused by a run that keeps others; in f32, where nothing is cast, it loads.
#[test]
fn the_precision_policy_must_match_under_mixed_precision() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batches = common::batches::<B>(2, ROWS, 3, &device);
    let dir = tempfile::tempdir().unwrap();
    for precision in [
        kiln_ml_train::Precision::F16Mixed,
        kiln_ml_train::Precision::F32,
    ] {
        let path = dir.path().join(format!("{precision}.kiln"));
        let mut run = trainer::<B>(&device, config().with_precision(precision), 1);
        for batch in &batches {
            run.train_batch(batch.clone()).unwrap();
        }
        run.save_checkpoint(&path).unwrap();
        let mut other = config().with_precision(precision);
        other.precision_policy.keep_norms_f32 = false;
        let loaded = trainer::<B>(&device, other, 1).load_checkpoint(&path);
        if precision == kiln_ml_train::Precision::F32 {
            loaded.unwrap();
        } else {
            let error = loaded.unwrap_err().to_string();
            assert!(error.contains("precision_policy"), "{error}");
        }
    }
}

/// A model with running statistics on its root, as a user's model may keep them.
#[derive(burn::module::Module, Debug)]
struct Tracked<B: burn::tensor::backend::Backend> {
    mlp: Mlp<B>,
    mean: burn::module::RunningState<burn::tensor::Tensor<B, 1>>,
}

impl<B: AutodiffBackend> kiln_ml_train::TrainStep<B> for Tracked<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(
        &self,
        batch: Batch<B>,
        autocast: &kiln_ml_train::Autocast,
    ) -> kiln_ml_train::StepOutput<B, ()> {
        self.mlp.step(batch, autocast)
    }
}

/// Loading a checkpoint gives the root's running statistics the saved ids: a mixed-precision
/// step after it still leaves them in f32 in the master (their low-precision copy shares them).
fn a_loaded_root_running_state_stays_f32_under_mixed_precision<B: AutodiffBackend>(
    device: B::Device,
) {
    let batches = common::batches::<B>(2, ROWS, 3, &device);
    // The device's first mixed precision (lavapipe has f16 only).
    let precision = *common::mixed_precisions::<B>(&device).first().unwrap();
    let trainer = || {
        let tracked = Tracked::<B> {
            mlp: common::model::<B>(&device, 1),
            mean: burn::module::RunningState::new(burn::tensor::Tensor::zeros([4], &device)),
        };
        let config = TrainerConfig::new().with_precision(precision);
        common::adam_trainer(tracked, 0.01, config, &device).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tracked.kiln");
    let mut first = trainer();
    first.train_batch(batches[0].clone()).unwrap();
    first.save_checkpoint(&path).unwrap();
    let mut resumed = trainer();
    resumed.load_checkpoint(&path).unwrap();
    resumed.train_batch(batches[1].clone()).unwrap();
    assert_eq!(
        resumed.model().mean.value().dtype(),
        burn::tensor::DType::F32
    );
}

/// Checkpoints are refused mid-window, and a run with other numerics is refused on load,
/// naming the field; a damaged file names the problem.
fn checkpoint_errors_are_explicit<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(2, ROWS, 3, &device);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.kiln");
    let mut run = trainer::<B>(&device, config(), 1);
    run.train_batch(batches[0].clone()).unwrap();
    let error = run.save_checkpoint(&path).unwrap_err();
    assert!(
        matches!(
            error,
            Error::CheckpointMidWindow {
                step: 1,
                pending: 1
            }
        ),
        "{error}"
    );
    run.train_batch(batches[1].clone()).unwrap();
    run.save_checkpoint(&path).unwrap();

    let mut other = trainer::<B>(&device, config().with_accumulation_steps(4), 1);
    let error = other.load_checkpoint(&path).unwrap_err().to_string();
    assert!(
        error.contains("accumulation_steps") && error.contains("a.kiln"),
        "{error}"
    );

    let mut scaler = config();
    scaler.loss_scaler.growth_interval = 7;
    let mut other_scaler = trainer::<B>(&device, scaler, 1);
    let error = other_scaler.load_checkpoint(&path).unwrap_err().to_string();
    assert!(error.contains("loss_scaler"), "{error}");

    // Same structure, other width: refused before Burn could load it and panic later.
    let narrow = kiln_ml_testkit::MlpConfig::new(common::INPUTS, &[3], 1).init::<B>(&device);
    let scheduler = LinearLrSchedulerConfig::new(0.05, 0.01, 6).init().unwrap();
    let mut narrow = Trainer::new(
        narrow,
        AdamConfig::new().init(),
        scheduler,
        config(),
        device.clone(),
    )
    .unwrap();
    let error = narrow.load_checkpoint(&path).unwrap_err().to_string();
    assert!(
        error.contains("model parameter shapes") && error.contains("layers.0.weight (parameter 0)"),
        "{error}"
    );

    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let damaged = dir.path().join("damaged.kiln");
    std::fs::write(&damaged, bytes).unwrap();
    let error = other.load_checkpoint(&damaged).unwrap_err().to_string();
    assert!(error.contains("checksum"), "{error}");
    let missing = other
        .load_checkpoint(Path::new("/nonexistent/x.kiln"))
        .unwrap_err();
    assert!(
        matches!(missing, Error::CheckpointIo { action: "read", .. }),
        "{missing}"
    );
}

/// The trainer saves the position the data reports (here a rank of 4 whose plan counts the
/// global order), and refuses data opened somewhere else than asked.
fn positions_come_from_the_data<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(BATCHES, ROWS, 5, &device);
    let mut rank = trainer::<B>(&device, config().with_accumulation_steps(1), 1);
    let mut data = GlobalOrder {
        batches: batches.clone().into_iter(),
        position: Position::start_of(0),
        world: 4,
    };
    for _ in 0..3 {
        let batch = data.next().unwrap().unwrap();
        rank.train_batch(batch).unwrap();
        rank.record_position(&data);
    }
    assert_eq!(
        rank.position(),
        Position {
            epoch: 0,
            consumed: 4 * 3 * ROWS as u64
        }
    );
    assert_eq!(
        rank.counters().samples,
        3 * ROWS as u64,
        "this rank's samples"
    );

    // Data that ignores the position it is asked for is an error, not a silent replay.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank.kiln");
    rank.save_checkpoint(&path).unwrap();
    let mut resumed = trainer::<B>(&device, config().with_accumulation_steps(1), 1);
    resumed.load_checkpoint(&path).unwrap();
    let error = resumed
        .fit(|_| common::plain(batches.clone(), Position::start_of(0)))
        .unwrap_err();
    assert!(matches!(error, Error::DataPosition { .. }), "{error}");
}

/// One rank's batches of a 4-rank world: positions count every rank's samples.
struct GlobalOrder<B: AutodiffBackend> {
    batches: std::vec::IntoIter<Batch<B>>,
    position: Position,
    world: u64,
}

impl<B: AutodiffBackend> Iterator for GlobalOrder<B> {
    type Item = kiln_ml_core::Result<Batch<B>>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.batches.next()?;
        self.position.consumed += self.world * batch.len() as u64;
        Some(Ok(batch))
    }
}

impl<B: AutodiffBackend> PositionedBatches for GlobalOrder<B> {
    fn position(&self) -> Position {
        self.position
    }

    fn last_batch_samples(&self) -> u64 {
        ROWS as u64
    }
}

crate::backend_tests!(
    positions_come_from_the_data,
    resumed_run_is_bit_identical,
    resumed_f16_run_with_scaler_state_is_bit_identical,
    fit_checkpoints_rotate_and_resume,
    checkpoint_errors_are_explicit,
    a_loaded_root_running_state_stays_f32_under_mixed_precision,
);
