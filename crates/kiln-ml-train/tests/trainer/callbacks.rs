//! Callbacks that act: early stopping, best-k checkpoints, metrics to observers.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::optim::Optimizer;
use kiln_ml_core::Event;
use kiln_ml_testkit::RecordingObserver;
use kiln_ml_train::{
    BestCheckpoints, Callback, CheckpointConfig, CheckpointWriter, Decision, EarlyStopping,
    EpochContext, Error, FitSummary, Mode, Result, Trainer, TrainerConfig, list_checkpoints,
};

use crate::common::{self, Batch, Mlp};

type B = Autodiff<Flex>;

fn batches() -> Vec<Batch<B>> {
    common::batches::<B>(3, 8, 5, &Default::default())
}

/// Fits `epochs` epochs, logging `valid/score` = `scores[epoch]` at each epoch's end.
fn fit_logging(
    config: TrainerConfig,
    scores: &'static [f64],
    callback: impl Callback + 'static,
) -> (Result<FitSummary>, Arc<RecordingObserver>) {
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    let recorder = common::recorder();
    trainer.add_observer(Arc::clone(&recorder));
    trainer.add_callback(callback);
    (fit_scores(&mut trainer, scores), recorder)
}

/// Fits `trainer` on the test batches, logging `valid/score` = `scores[epoch]` at each epoch's
/// end.
fn fit_scores<O: Optimizer<Mlp<B>, B>>(
    trainer: &mut Trainer<B, Mlp<B>, O, f64>,
    scores: &'static [f64],
) -> Result<FitSummary> {
    let data = batches();
    trainer.fit_with(
        |position| common::plain(data.clone(), position),
        |trainer, epoch| {
            trainer.log_metric("valid/score", scores[epoch.epoch as usize]);
            Ok(())
        },
    )
}

#[test]
fn early_stopping_stops_writes_its_checkpoint_and_returns_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints only every 1,000 steps: the stopped epoch's is written anyway.
    let mut checkpoints = CheckpointConfig::new(dir.path()).with_every_steps(1000);
    checkpoints.at_epoch_end = false;
    let config = TrainerConfig::new()
        .with_num_epochs(10)
        .with_checkpoint(Some(checkpoints));
    // Best at epoch 1; epochs 2 and 3 do not improve: patience 2 stops after epoch 3.
    let (summary, recorder) = fit_logging(
        config,
        &[1.0, 0.5, 0.6, 0.55, 0.7, 0.1, 0.1, 0.1, 0.1, 0.1],
        EarlyStopping::new("valid/score", Mode::Min).with_patience(2),
    );
    let summary = summary.unwrap();
    assert_eq!(summary.stopped_early, Some(3));
    assert_eq!(summary.counters.optimizer_steps, 4 * 3);
    assert!(summary.last_loss.is_some());
    let written = list_checkpoints(dir.path()).unwrap();
    assert_eq!(written.len(), 1, "{written:?}");
    let events = recorder.events();
    let metrics = events
        .iter()
        .filter(|event| matches!(event, Event::Metric { name, .. } if name == "valid/score"))
        .count();
    assert_eq!(metrics, 4);
    assert!(
        events
            .iter()
            .any(|event| matches!(event, Event::CheckpointSaved { step: 12, .. }))
    );
}

#[test]
fn a_nan_metric_stops_at_once_and_keeps_the_last_good_checkpoint() {
    // Epoch 2 diverges; its last step, 9, is also `max_steps` in the second run, whose end
    // would otherwise write that step's checkpoint.
    for max_steps in [None, Some(9)] {
        let dir = tempfile::tempdir().unwrap();
        // A checkpoint at every epoch's end, only the newest kept: the diverged epoch writes
        // none, so epoch 1's survives the prune.
        let checkpoints = CheckpointConfig::new(dir.path()).with_keep_last(1);
        let config = TrainerConfig::new()
            .with_num_epochs(10)
            .with_max_steps(max_steps)
            .with_checkpoint(Some(checkpoints));
        let (summary, recorder) = fit_logging(
            config,
            &[1.0, 0.5, f64::NAN, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1],
            EarlyStopping::new("valid/score", Mode::Min).with_patience(5),
        );
        let summary = summary.unwrap();
        assert_eq!(summary.stopped_early, Some(2));
        assert_eq!(summary.counters.optimizer_steps, 9);
        let written = list_checkpoints(dir.path()).unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        assert!(
            written[0].ends_with("step-000000000006.kiln"),
            "epoch 1 ends at step 6: {written:?}"
        );
        assert_eq!(
            common::saved_checkpoint_steps(&recorder),
            [3, 6],
            "{max_steps:?}"
        );
    }
}

#[test]
fn best_checkpoints_keep_the_best_k_by_the_metric() {
    let dir = tempfile::tempdir().unwrap();
    let config = TrainerConfig::new().with_num_epochs(5);
    let best = BestCheckpoints::new(dir.path(), "valid/score", Mode::Max, 2);
    let (summary, _) = fit_logging(config, &[0.2, 0.9, 0.5, 0.95, 0.1], best.clone());
    assert_eq!(summary.unwrap().stopped_early, None);
    let ranked = best.ranked().unwrap();
    let kept: Vec<(String, f64)> = ranked
        .iter()
        .map(|entry| {
            let name = entry
                .path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, entry.value)
        })
        .collect();
    assert_eq!(
        kept,
        [
            ("best-epoch-3-step-12.kiln".to_owned(), 0.95),
            ("best-epoch-1-step-6.kiln".to_owned(), 0.9),
        ]
    );
    // Only the kept ones are on disk, and they load.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, TrainerConfig::new());
    let position = trainer.load_checkpoint(&ranked[0].path).unwrap();
    assert_eq!(position, kiln_ml_core::Position::start_of(4));
}

/// `BestCheckpoints` runs after the other callbacks whatever the order they were added in, so
/// its checkpoint of an epoch holds that epoch's state of an `EarlyStopping` added after it.
#[test]
fn a_best_checkpoint_holds_the_epochs_state_of_callbacks_added_after_it() {
    const SCORES: &[f64] = &[1.0, 0.5, 0.6, 0.7, 0.8, 0.9];
    let stopping = || EarlyStopping::new("valid/score", Mode::Min).with_patience(2);
    let dir = tempfile::tempdir().unwrap();
    let best = BestCheckpoints::new(dir.path(), "valid/score", Mode::Min, 1);
    let config = TrainerConfig::new().with_num_epochs(2);
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    trainer.add_callback(best.clone());
    trainer.add_callback(stopping());
    fit_scores(&mut trainer, SCORES).unwrap();
    let best_of_epoch_1 = best.best().unwrap().unwrap().path;
    // Resumed from it, the early stopping counts on from epoch 1's best (0.5) and stops at
    // epoch 3; with epoch 0's state (best 1.0), 0.6 would improve and it would stop at 4.
    let config = TrainerConfig::new().with_num_epochs(SCORES.len() as u64);
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    trainer.load_checkpoint(&best_of_epoch_1).unwrap();
    trainer.add_callback(stopping());
    let resumed = fit_scores(&mut trainer, SCORES).unwrap();
    assert_eq!(resumed.stopped_early, Some(3));
}

/// Asks for a checkpoint after epoch 1 only.
struct CheckpointAfterEpochOne;

impl Callback for CheckpointAfterEpochOne {
    fn on_epoch_end(
        &mut self,
        context: &EpochContext<'_>,
        _checkpoints: &dyn CheckpointWriter,
    ) -> Result<Decision> {
        Ok(if context.summary.epoch == 1 {
            Decision::CHECKPOINT
        } else {
            Decision::CONTINUE
        })
    }
}

#[test]
fn a_callback_can_ask_for_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut checkpoints = CheckpointConfig::new(dir.path()).with_every_steps(1000);
    checkpoints.at_epoch_end = false;
    let config = TrainerConfig::new()
        .with_num_epochs(3)
        .with_checkpoint(Some(checkpoints));
    let (summary, recorder) = fit_logging(config, &[1.0, 1.0, 1.0], CheckpointAfterEpochOne);
    assert_eq!(summary.unwrap().stopped_early, None);
    assert_eq!(list_checkpoints(dir.path()).unwrap().len(), 1);
    let saved = common::saved_checkpoint_steps(&recorder);
    assert_eq!(saved, [6]);
}

#[test]
fn a_callback_on_an_unlogged_metric_names_it_and_what_was_logged() {
    let config = TrainerConfig::new().with_num_epochs(2);
    let (summary, _) = fit_logging(
        config,
        &[1.0, 1.0],
        EarlyStopping::new("valid/min_ade", Mode::Min),
    );
    let error = summary.unwrap_err();
    assert!(
        matches!(error, Error::MissingMetric { epoch: 0, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("valid/score"), "{error}");
}

/// `epochs` epochs with a checkpoint at each one's end in `dir`.
fn checkpointed(dir: &std::path::Path, epochs: usize) -> TrainerConfig {
    TrainerConfig::new()
        .with_num_epochs(epochs as u64)
        .with_checkpoint(Some(CheckpointConfig::new(dir)))
}

/// Fits with `early_stopping` on `scores` (as [`fit_logging`]) from the newest checkpoint in
/// `dir`, the callback added before or after the checkpoint is loaded.
fn resume_logging(
    dir: &std::path::Path,
    scores: &'static [f64],
    early_stopping: EarlyStopping,
    add_first: bool,
) -> Result<FitSummary> {
    let config = checkpointed(dir, scores.len());
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    let mut early_stopping = Some(early_stopping);
    if add_first {
        trainer.add_callback(early_stopping.take().unwrap());
    }
    let latest = kiln_ml_train::latest_checkpoint(dir).unwrap().unwrap();
    trainer.load_checkpoint(&latest).unwrap();
    if let Some(callback) = early_stopping {
        trainer.add_callback(callback);
    }
    let data = batches();
    trainer.fit_with(
        |position| common::plain(data.clone(), position),
        |trainer, epoch| {
            trainer.log_metric("valid/score", scores[epoch.epoch as usize]);
            trainer.log_metric("valid/other", scores[epoch.epoch as usize]);
            Ok(())
        },
    )
}

#[test]
fn a_resumed_run_stops_early_where_the_whole_run_did() {
    const SCORES: &[f64] = &[1.0, 0.5, 0.6, 0.55, 0.7, 0.1, 0.1, 0.1];
    let stopping = || EarlyStopping::new("valid/score", Mode::Min).with_patience(2);
    let whole = tempfile::tempdir().unwrap();
    let (summary, _) = fit_logging(checkpointed(whole.path(), SCORES.len()), SCORES, stopping());
    assert_eq!(summary.unwrap().stopped_early, Some(3));
    for add_first in [true, false] {
        // Interrupted after epoch 2: one epoch without improvement counted so far.
        let dir = tempfile::tempdir().unwrap();
        let (summary, _) = fit_logging(checkpointed(dir.path(), 3), SCORES, stopping());
        assert_eq!(summary.unwrap().stopped_early, None);
        let resumed = resume_logging(dir.path(), SCORES, stopping(), add_first).unwrap();
        assert_eq!(resumed.stopped_early, Some(3), "added first: {add_first}");
    }
    // A callback on another monitor finds no state of its own (the saved one is dropped with
    // a warning): fresh, it takes epoch 3's 0.55 as its best, improves at epoch 5 and stops
    // at epoch 7. Given the saved state, it would stop at 3.
    let dir = tempfile::tempdir().unwrap();
    let (summary, _) = fit_logging(checkpointed(dir.path(), 3), SCORES, stopping());
    summary.unwrap();
    let other = EarlyStopping::new("valid/other", Mode::Min).with_patience(2);
    let resumed = resume_logging(dir.path(), SCORES, other, true).unwrap();
    assert_eq!(resumed.stopped_early, Some(7));
}

#[test]
fn two_callbacks_with_one_state_key_are_refused_when_fit_starts() {
    let config = TrainerConfig::new().with_num_epochs(2);
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    trainer.add_callback(EarlyStopping::new("valid/score", Mode::Min).with_patience(1));
    trainer.add_callback(EarlyStopping::new("valid/score", Mode::Min).with_patience(5));
    let data = batches();
    let error = trainer
        .fit(|position| common::plain(data.clone(), position))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::DuplicateCallbackState {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(trainer.counters().optimizer_steps, 0, "nothing trained");
}
