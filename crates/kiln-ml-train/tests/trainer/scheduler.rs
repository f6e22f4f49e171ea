//! A skipped optimizer step leaves the parameters and the LR scheduler where they were.

use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::optim::AdamConfig;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{SkipReason, StepOutcome};
use kiln_ml_train::{Trainer, TrainerConfig};

use crate::common::{self, Batch};

/// A batch whose targets are NaN: its loss and gradients are NaN.
fn poisoned<B: AutodiffBackend>(batch: &Batch<B>) -> Batch<B> {
    Batch {
        inputs: batch.inputs.clone(),
        targets: batch.targets.clone().mul_scalar(f32::NAN),
    }
}

fn skipped_step_does_not_advance_scheduler<B: AutodiffBackend>(device: B::Device) {
    let scheduler = LinearLrSchedulerConfig::new(0.5, 0.1, 10).init().unwrap();
    let mut trainer = Trainer::new(
        common::model::<B>(&device, 1),
        AdamConfig::new().init(),
        scheduler,
        TrainerConfig::new().with_track_grad_norm(true),
        device.clone(),
    )
    .unwrap();
    let batches = common::batches::<B>(6, 4, 2, &device);
    let mut rates = Vec::new();
    let mut outcomes = Vec::new();
    for (index, batch) in batches.iter().enumerate() {
        let poison = index == 1 || index == 3;
        let before = common::params(trainer.model());
        let batch = if poison {
            poisoned(batch)
        } else {
            batch.clone()
        };
        let report = trainer.train_batch(batch).unwrap().step.unwrap();
        let after = common::params(trainer.model());
        if poison {
            assert_eq!(
                before, after,
                "a skipped step must not touch the parameters"
            );
            assert!(report.grad_norm.unwrap().is_nan());
        } else {
            assert_ne!(before, after);
            assert!(after.iter().all(|value| value.is_finite()));
        }
        rates.push(report.learning_rate);
        outcomes.push(report.outcome);
    }
    let skip = StepOutcome::Skipped(SkipReason::NonFiniteGradients);
    assert_eq!(
        outcomes,
        [
            StepOutcome::Applied,
            skip,
            StepOutcome::Applied,
            skip,
            StepOutcome::Applied,
            StepOutcome::Applied
        ]
    );
    // The applied steps see 0.5, 0.46, 0.42, 0.38 with no gaps; a skipped step reports the
    // rate the next applied step then uses.
    let expected = [0.5, 0.46, 0.46, 0.42, 0.42, 0.38];
    for (got, want) in rates.iter().zip(expected) {
        assert!((got - want).abs() < 1e-12, "{rates:?}");
    }
    let counters = trainer.counters();
    assert_eq!((counters.applied_steps, counters.skipped_steps), (4, 2));
    assert_eq!(counters.optimizer_steps, 6);
}

/// Without any gradient-norm computation, a step that reads its loss back checks it for free
/// and skips a NaN step.
fn nan_loss_is_skipped_when_the_loss_is_read<B: AutodiffBackend>(device: B::Device) {
    let mut trainer = Trainer::new(
        common::model::<B>(&device, 1),
        AdamConfig::new().init(),
        0.01,
        TrainerConfig::new().with_read_loss_every(1),
        device.clone(),
    )
    .unwrap();
    let batch = common::batches::<B>(1, 4, 2, &device).remove(0);
    let before = common::params(trainer.model());
    let report = trainer.train_batch(poisoned(&batch)).unwrap().step.unwrap();
    assert_eq!(
        report.outcome,
        StepOutcome::Skipped(SkipReason::NonFiniteGradients)
    );
    assert_eq!(report.grad_norm, None, "no norm was asked for");
    assert_eq!(common::params(trainer.model()), before);
}

crate::backend_tests!(
    skipped_step_does_not_advance_scheduler,
    nan_loss_is_skipped_when_the_loss_is_read,
);
