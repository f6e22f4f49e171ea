//! The CSV and TensorBoard loggers, fed by a real run.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use kiln_ml_train::{CsvLogger, Error, TensorBoardLogger, TrainerConfig, read_scalars};

use crate::common;

type B = Autodiff<Flex>;

/// Fits with a CSV and a TensorBoard logger in `dir` (a training row every `every_steps`),
/// logging `valid/score` = 10 + epoch at each epoch's end; returns the loggers, not finished.
fn fit_logging_scores(
    config: TrainerConfig,
    dir: &std::path::Path,
    every_steps: u64,
) -> (Arc<CsvLogger>, Arc<TensorBoardLogger>) {
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    let csv = Arc::new(CsvLogger::create(dir, every_steps).unwrap());
    let tensorboard = Arc::new(TensorBoardLogger::create(dir, every_steps).unwrap());
    trainer.add_observer(Arc::clone(&csv));
    trainer.add_observer(Arc::clone(&tensorboard));
    let data = common::batches::<B>(4, 8, 5, &Default::default());
    trainer
        .fit_with(
            |position| common::plain(data.clone(), position),
            |trainer, epoch| {
                trainer.log_metric("valid/score", 10.0 + epoch.epoch as f64);
                Ok(())
            },
        )
        .unwrap();
    (csv, tensorboard)
}

#[test]
fn a_run_logs_its_loss_every_n_steps_and_its_metrics_every_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let config = TrainerConfig::new()
        .with_num_epochs(2)
        .with_read_loss_every(2);
    let (csv, tensorboard) = fit_logging_scores(config, dir.path(), 2);
    csv.finish().unwrap();
    tensorboard.finish().unwrap();

    let text = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header[..3], ["epoch", "step", "elapsed_s"]);
    for column in [
        "train/loss",
        "train/lr",
        "valid/score",
        "train/samples_per_second",
    ] {
        assert!(header.contains(&column), "{column} missing from {header:?}");
    }
    // 8 steps: a training row at steps 2, 4, 6, 8 and a metric row after each epoch.
    assert_eq!(lines.len(), 1 + 4 + 2, "{text}");
    let column = |name: &str| header.iter().position(|column| *column == name).unwrap();
    let cells: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|line| line.split(',').collect())
        .collect();
    let steps: Vec<&str> = cells.iter().map(|row| row[1]).collect();
    assert_eq!(steps, ["2", "4", "4", "6", "8", "8"]);
    assert_eq!(cells[2][column("valid/score")], "10");
    // Metrics count in the epoch that logged them, training rows in the epoch they ran in.
    let epochs: Vec<&str> = cells.iter().map(|row| row[0]).collect();
    assert_eq!(epochs, ["0", "0", "0", "1", "1", "1"]);
    assert_eq!(cells[5][column("valid/score")], "11");
    assert!(cells[0][column("train/loss")].parse::<f64>().unwrap() > 0.0);

    let scalars = read_scalars(tensorboard.path()).unwrap();
    let tagged = |tag: &str| -> Vec<(u64, f32)> {
        scalars
            .iter()
            .filter(|scalar| scalar.tag == tag)
            .map(|scalar| (scalar.step, scalar.value))
            .collect()
    };
    assert_eq!(tagged("valid/score"), [(4, 10.0), (8, 11.0)]);
    let losses = tagged("train/loss");
    assert_eq!(
        losses.iter().map(|(step, _)| *step).collect::<Vec<_>>(),
        [2, 4, 6, 8]
    );
    let csv_losses: Vec<f32> = cells
        .iter()
        .filter(|row| !row[column("train/loss")].is_empty())
        .map(|row| row[column("train/loss")].parse::<f64>().unwrap() as f32)
        .collect();
    assert_eq!(
        losses.iter().map(|(_, loss)| *loss).collect::<Vec<_>>(),
        csv_losses
    );
}

/// An epoch's metrics reach the TensorBoard file once their row is complete (here at the
/// epoch's checkpoint), not at the next epoch's end: read while the next epoch opens.
#[test]
fn tensorboard_has_an_epochs_metrics_before_the_next_epoch_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = TrainerConfig::new()
        .with_num_epochs(2)
        .with_checkpoint(Some(kiln_ml_train::CheckpointConfig::new(
            dir.path().join("checkpoints"),
        )));
    let mut trainer = common::sgd_trainer::<B>(&Default::default(), 0.01, config);
    let tensorboard = Arc::new(TensorBoardLogger::create(dir.path(), 100).unwrap());
    trainer.add_observer(Arc::clone(&tensorboard));
    let data = common::batches::<B>(4, 8, 5, &Default::default());
    let path = tensorboard.path().to_path_buf();
    let seen_at_epoch_1 = std::cell::RefCell::new(None);
    trainer
        .fit_with(
            |position| {
                if position.epoch == 1 {
                    let scores: Vec<f32> = read_scalars(&path)
                        .unwrap()
                        .into_iter()
                        .filter(|scalar| scalar.tag == "valid/score")
                        .map(|scalar| scalar.value)
                        .collect();
                    *seen_at_epoch_1.borrow_mut() = Some(scores);
                }
                common::plain(data.clone(), position)
            },
            |trainer, epoch| {
                trainer.log_metric("valid/score", 10.0 + epoch.epoch as f64);
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(seen_at_epoch_1.into_inner(), Some(vec![10.0]));
}

/// Without checkpoints, the last epoch's metrics are in the TensorBoard and CSV files when
/// `fit` returns, before `finish` or a drop: written when the epoch closes.
#[test]
fn the_last_epochs_metrics_are_on_disk_when_fit_returns() {
    let dir = tempfile::tempdir().unwrap();
    let config = TrainerConfig::new().with_num_epochs(2);
    let (csv, tensorboard) = fit_logging_scores(config, dir.path(), 100);
    let scores: Vec<f32> = read_scalars(tensorboard.path())
        .unwrap()
        .into_iter()
        .filter(|scalar| scalar.tag == "valid/score")
        .map(|scalar| scalar.value)
        .collect();
    assert_eq!(scores, [10.0, 11.0]);
    let table = std::fs::read_to_string(csv.path()).unwrap();
    let column = table
        .lines()
        .next()
        .and_then(|header| header.split(',').position(|name| name == "valid/score"))
        .expect("a valid/score column");
    let logged: Vec<f64> = table
        .lines()
        .skip(1)
        .filter_map(|line| line.split(',').nth(column)?.parse().ok())
        .collect();
    assert_eq!(logged, [10.0, 11.0], "{table}");
}

/// A run that fails before any file write keeps the rows its loggers had: they write them when
/// dropped.
#[test]
fn a_failed_run_keeps_the_rows_it_logged() {
    let dir = tempfile::tempdir().unwrap();
    let device = Default::default();
    let config = TrainerConfig::new()
        .with_num_epochs(1)
        .with_detect_anomalies(true);
    let mut trainer = common::sgd_trainer::<B>(&device, 0.01, config);
    let csv = Arc::new(CsvLogger::create(dir.path(), 1).unwrap());
    let tensorboard = Arc::new(TensorBoardLogger::create(dir.path(), 1).unwrap());
    trainer.add_observer(Arc::clone(&csv));
    trainer.add_observer(Arc::clone(&tensorboard));
    let mut data = common::batches::<B>(4, 8, 5, &device);
    let (inputs, mut targets) = common::rows(8, 6);
    targets[0] = f32::NAN;
    data.push(common::batch::<B>(&inputs, &targets, &device));
    let error = trainer
        .fit(|position| common::plain(data.clone(), position))
        .unwrap_err();
    assert!(matches!(error, Error::NonFiniteLoss { .. }), "{error}");
    let events = tensorboard.path().to_path_buf();
    drop((trainer, csv, tensorboard));

    let text = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    let steps: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|line| line.split(',').nth(1).unwrap())
        .collect();
    assert_eq!(steps, ["1", "2", "3", "4"], "{text}");
    let logged: Vec<u64> = read_scalars(&events)
        .unwrap()
        .iter()
        .filter(|scalar| scalar.tag == "train/lr")
        .map(|scalar| scalar.step)
        .collect();
    assert_eq!(logged, [1, 2, 3, 4]);
}

#[test]
fn event_files_started_together_are_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let first = TensorBoardLogger::create(dir.path(), 1).unwrap();
    let second = TensorBoardLogger::create(dir.path(), 1).unwrap();
    assert_ne!(first.path(), second.path());
    let name = first
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("events.out.tfevents."), "{name}");
}
