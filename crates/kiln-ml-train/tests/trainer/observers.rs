//! Events: epochs, batches, phases in step order, step reports.

use std::sync::Arc;

use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Event, Phase};
use kiln_ml_testkit::RecordingObserver;
use kiln_ml_train::{ProgressObserver, TrainerConfig};

use crate::common;

fn events_follow_the_step_structure<B: AutodiffBackend>(device: B::Device) {
    let config = TrainerConfig::new().with_accumulation_steps(2);
    let mut trainer = common::sgd_trainer::<B>(&device, 0.01, config);
    let recorder = Arc::new(RecordingObserver::with_accurate_timing());
    trainer.add_observer(recorder.clone());
    trainer.add_observer(ProgressObserver::hidden());
    let batches = common::batches::<B>(3, 4, 1, &device);
    let summary = trainer.fit(|p| common::plain(batches.clone(), p)).unwrap();

    let events = recorder.events();
    // The first step's time, once: in the summary, on the trainer and as an event.
    let first: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            Event::FirstStep { step, elapsed } => Some((*step, *elapsed)),
            _ => None,
        })
        .collect();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].0, 1);
    assert_eq!(summary.time_to_first_step, Some(first[0].1));
    assert_eq!(trainer.time_to_first_step(), Some(first[0].1));
    let names: Vec<String> = events
        .iter()
        .map(|event| match event {
            Event::EpochStart { .. } => "epoch_start".to_owned(),
            Event::EpochEnd { .. } => "epoch_end".to_owned(),
            Event::EpochClosed { epoch } => format!("epoch_closed{epoch}"),
            Event::BatchReady { .. } => "batch".to_owned(),
            Event::PhaseStart { phase, step } => format!("{phase}@{step}"),
            Event::PhaseEnd { .. } => "end".to_owned(),
            Event::Step(report) => format!("step{}", report.step),
            Event::FirstStep { step, .. } => format!("first_step{step}"),
            _ => "other".to_owned(),
        })
        .collect();
    let micro = |step: u64| {
        [
            format!("data_wait@{step}"),
            "end".to_owned(),
            "batch".to_owned(),
            format!("host_to_device@{step}"),
            "end".to_owned(),
            format!("forward@{step}"),
            "end".to_owned(),
            format!("backward@{step}"),
            "end".to_owned(),
        ]
    };
    let optimizer = |step: u64| {
        [
            format!("optimizer@{step}"),
            "end".to_owned(),
            format!("step{step}"),
        ]
    };
    let mut expected = vec!["epoch_start".to_owned()];
    expected.extend(micro(1));
    expected.extend(micro(1));
    expected.extend(optimizer(1));
    // The first step of the fit, timed once the device has finished it.
    expected.push("first_step1".to_owned());
    expected.extend(micro(2));
    // The iterator runs dry: the last partial window is flushed at the epoch end.
    expected.extend(["data_wait@2".to_owned(), "end".to_owned()]);
    expected.extend(optimizer(2));
    expected.push("epoch_end".to_owned());
    // After the epoch's end-of-epoch work (here none: no validation, callback or checkpoint).
    expected.push("epoch_closed0".to_owned());
    assert_eq!(names, expected);

    match &events[events.len() - 2] {
        Event::EpochEnd {
            epoch,
            steps,
            samples,
        } => assert_eq!((*epoch, *steps, *samples), (0, 2, 12)),
        other => panic!("{other:?}"),
    }
    let batch_samples: Vec<u64> = events
        .iter()
        .filter_map(|event| match event {
            Event::BatchReady { samples, .. } => Some(*samples),
            _ => None,
        })
        .collect();
    assert_eq!(batch_samples, [4, 4, 4]);
    assert!(events.iter().all(|event| match event {
        Event::PhaseStart { phase, .. } => *phase != Phase::Validation,
        _ => true,
    }));
}

crate::backend_tests!(events_follow_the_step_structure);
