//! Callbacks that act: early stopping, best-k checkpoints, metrics to observers.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use kiln_ml_core::Event;
use kiln_ml_testkit::RecordingObserver;
use kiln_ml_train::{
    BestCheckpoints, Callback, CheckpointConfig, CheckpointWriter, Decision, EarlyStopping,
    EpochContext, Error, FitSummary, Mode, Result, TrainerConfig, list_checkpoints,
};

use crate::common::{self, Batch};

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
    let data = batches();
    let summary = trainer.fit_with(
        |position| common::plain(data.clone(), position),
        |trainer, epoch| {
            trainer.log_metric("valid/score", scores[epoch.epoch as usize]);
            Ok(())
        },
    );
    (summary, recorder)
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
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint at every epoch's end, only the newest kept: the diverged epoch writes none,
    // so epoch 1's survives the prune.
    let checkpoints = CheckpointConfig::new(dir.path()).with_keep_last(1);
    let config = TrainerConfig::new()
        .with_num_epochs(10)
        .with_checkpoint(Some(checkpoints));
    let (summary, recorder) = fit_logging(
        config,
        &[1.0, 0.5, f64::NAN, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1],
        EarlyStopping::new("valid/score", Mode::Min).with_patience(5),
    );
    let summary = summary.unwrap();
    assert_eq!(summary.stopped_early, Some(2));
    let written = list_checkpoints(dir.path()).unwrap();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(
        written[0].ends_with("step-000000000006.kiln"),
        "epoch 1 ends at step 6: {written:?}"
    );
    let saved: Vec<u64> = recorder
        .events()
        .iter()
        .filter_map(|event| match event {
            Event::CheckpointSaved { step, .. } => Some(*step),
            _ => None,
        })
        .collect();
    assert_eq!(saved, [3, 6]);
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
