//! Host readbacks per optimizer step: none in f32 and bf16 by default, one in f16, and norm
//! clipping on the device gives what clipping on the host gives.

use burn::tensor::backend::AutodiffBackend;
use kiln_ml_train::{GradientClipping, Precision, Trainer, TrainerConfig};

use crate::common;

const STEPS: u64 = 6;

/// Trains `STEPS` optimizer steps of two micro-batches and returns the readbacks made, the
/// step reports' losses and the final parameters.
fn run<B: AutodiffBackend>(
    device: &B::Device,
    config: TrainerConfig,
) -> (u64, Vec<Option<f64>>, Vec<f32>) {
    let mut trainer = common::sgd_trainer::<B>(device, 0.05, config.with_accumulation_steps(2));
    let mut losses = Vec::new();
    for batch in common::batches::<B>(2 * STEPS as usize, 4, 5, device) {
        if let Some(report) = trainer.train_batch(batch).unwrap().step {
            losses.push(report.loss);
        }
    }
    assert_eq!(losses.len() as u64, STEPS);
    let readbacks = trainer.counters().readbacks;
    (readbacks, losses, common::params(trainer.model()))
}

fn readbacks_per_precision<B: AutodiffBackend>(device: B::Device) {
    for precision in [Precision::F32, Precision::Bf16Mixed, Precision::F16Mixed] {
        if precision.check_supported::<B>(&device).is_err() {
            continue;
        }
        let config = TrainerConfig::new().with_precision(precision);
        let (readbacks, losses, _) = run::<B>(&device, config.clone());
        let expected = if precision == Precision::F16Mixed {
            STEPS
        } else {
            0
        };
        assert_eq!(readbacks, expected, "{precision}");
        assert_eq!(
            losses.iter().all(Option::is_some),
            precision == Precision::F16Mixed,
            "{precision}: {losses:?}"
        );
        // Norm clipping adds no readback: its coefficient stays on the device.
        let clipped = config.with_clipping(Some(GradientClipping::Norm { max_norm: 0.1 }));
        assert_eq!(
            run::<B>(&device, clipped).0,
            expected,
            "{precision} clipped"
        );
    }
    // Asking for the loss every 3 steps reads it on those steps only.
    let (readbacks, losses, _) = run::<B>(&device, TrainerConfig::new().with_read_loss_every(3));
    assert_eq!(readbacks, 2);
    let read: Vec<bool> = losses.iter().map(Option::is_some).collect();
    assert_eq!(read, [false, false, true, false, false, true]);
}

/// Clipping by global norm with the coefficient on the device (no readback) and on the host
/// (a readback every step) gives the same parameters.
fn device_clipping_matches_host_clipping<B: AutodiffBackend>(device: B::Device) {
    let clipping = Some(GradientClipping::Norm { max_norm: 0.05 });
    let on_device = run::<B>(&device, TrainerConfig::new().with_clipping(clipping)).2;
    let on_host = run::<B>(
        &device,
        TrainerConfig::new()
            .with_clipping(clipping)
            .with_read_loss_every(1),
    )
    .2;
    let unclipped = run::<B>(&device, TrainerConfig::new()).2;
    let diff = common::max_abs_diff(&on_device, &on_host);
    assert!(diff < 1e-6, "device and host clipping differ by {diff}");
    assert!(
        common::max_abs_diff(&on_device, &unclipped) > 1e-3,
        "the threshold must actually clip"
    );
}

/// The loss of the last step is read only when asked for, once.
fn last_loss_is_read_on_demand<B: AutodiffBackend>(device: B::Device) {
    let mut trainer: Trainer<B, _, _, _> =
        common::sgd_trainer::<B>(&device, 0.05, TrainerConfig::new());
    for batch in common::batches::<B>(3, 4, 5, &device) {
        trainer.train_batch(batch).unwrap();
    }
    assert_eq!(trainer.counters().readbacks, 0);
    let loss = trainer.last_loss().unwrap().unwrap();
    assert!(loss.is_finite() && loss > 0.0);
    assert_eq!(trainer.last_loss().unwrap(), Some(loss));
    assert_eq!(trainer.counters().readbacks, 1, "read once, then cached");
}

/// Without readbacks the host keeps at most `max_queued_steps` steps queued: once that many are
/// queued past the last finished one, the step waits for an earlier one (a lagged wait, never a
/// device sync). With a bound up to 3, every step from the bound's on waits; with a larger one,
/// every `max_queued_steps / 2`-th; with 0, none.
fn run_ahead_is_bounded_by_lagged_waits<B: AutodiffBackend>(device: B::Device) {
    let waits = |config: TrainerConfig| {
        let mut trainer = common::sgd_trainer::<B>(&device, 0.05, config);
        for batch in common::batches::<B>(STEPS as usize, 4, 5, &device) {
            trainer.train_batch(batch).unwrap();
        }
        let counters = trainer.counters();
        assert_eq!(counters.readbacks, 0, "no wait is a readback");
        counters.lagged_waits
    };
    assert_eq!(waits(TrainerConfig::new()), STEPS - 1, "default bound 2");
    assert_eq!(
        waits(TrainerConfig::new().with_max_queued_steps(3)),
        STEPS - 2
    );
    assert_eq!(waits(TrainerConfig::new().with_max_queued_steps(1)), STEPS);
    assert_eq!(waits(TrainerConfig::new().with_max_queued_steps(0)), 0);
    // From 4 on, every other step reads its loss: at step 4 the host waits for step 2, at 6
    // for step 4.
    assert_eq!(waits(TrainerConfig::new().with_max_queued_steps(4)), 2);
    assert_eq!(waits(TrainerConfig::new().with_max_queued_steps(8)), 0);
}

/// A step that reads back empties the queue: with a readback every 3rd step, steps 1-2 wait
/// once, 3 reads, 4-5 wait once, 6 reads.
fn a_readback_empties_the_run_ahead_queue<B: AutodiffBackend>(device: B::Device) {
    let waits = |config: TrainerConfig| {
        let mut trainer = common::sgd_trainer::<B>(&device, 0.05, config);
        for batch in common::batches::<B>(STEPS as usize, 4, 5, &device) {
            trainer.train_batch(batch).unwrap();
        }
        trainer.counters().lagged_waits
    };
    assert_eq!(waits(TrainerConfig::new().with_read_loss_every(3)), 2);
    assert_eq!(waits(TrainerConfig::new().with_read_loss_every(1)), 0);
}

crate::backend_tests!(
    readbacks_per_precision,
    run_ahead_is_bounded_by_lagged_waits,
    a_readback_empties_the_run_ahead_queue,
    device_clipping_matches_host_clipping,
    last_loss_is_read_on_demand,
);
