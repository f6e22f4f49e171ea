//! Mixed precision: f32 master weights, low-precision compute, f16 skip-and-backoff.

use burn::nn::{LinearConfig, Relu};
use burn::tensor::DType;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{SkipReason, StepOutcome};
use kiln_ml_train::{LossScalerConfig, Precision, TrainerConfig};

use crate::common::{self, Batch, Mlp};

fn train<B: AutodiffBackend>(device: &B::Device, precision: Precision) -> (f64, Mlp<B>, u64) {
    let config = TrainerConfig::new()
        .with_precision(precision)
        .with_num_epochs(25);
    let mut trainer =
        common::adam_trainer(common::model::<B>(device, 2), 0.01, config, device).unwrap();
    let batches = common::batches::<B>(8, 16, 4, device);
    let summary = trainer.fit(|p| common::plain(batches.clone(), p)).unwrap();
    let skipped = summary.counters.skipped_steps;
    (summary.last_loss.unwrap(), trainer.into_model(), skipped)
}

/// f16 and bf16 runs end near the f32 run, and their master weights stay f32.
fn mixed_precision_tracks_f32<B: AutodiffBackend>(device: B::Device) {
    let (f32_loss, _, _) = train::<B>(&device, Precision::F32);
    for precision in common::mixed_precisions::<B>(&device) {
        let (loss, model, skipped) = train::<B>(&device, precision);
        assert_eq!(
            model.layers[0].weight.val().dtype(),
            DType::F32,
            "{precision}"
        );
        // f16 may skip a step or two while the 2^16 scale calibrates (as PyTorch's docs say).
        let allowed = if precision == Precision::F16Mixed {
            2
        } else {
            0
        };
        assert!(skipped <= allowed, "{precision}: {skipped} skipped steps");
        let relative = (loss - f32_loss).abs() / f32_loss;
        assert!(relative < 0.1, "{precision}: loss {loss} vs f32 {f32_loss}");
    }
}

/// A batch that overflows f16 under the 2^16 scale is skipped: parameters unchanged, the scale
/// halves; clean batches then train normally (the scheduler on skips: `scheduler.rs`).
fn f16_overflow_skips_and_backs_off<B: AutodiffBackend>(device: B::Device) {
    let config = TrainerConfig::new().with_precision(Precision::F16Mixed);
    let mut trainer =
        common::adam_trainer(common::model::<B>(&device, 2), 0.01, config, &device).unwrap();
    let batches = common::batches::<B>(2, 8, 4, &device);
    let huge = Batch {
        inputs: batches[0].inputs.clone().mul_scalar(1000.0),
        targets: batches[0].targets.clone(),
    };
    let before = common::params(trainer.model());
    let report = trainer.train_batch(huge).unwrap().step.unwrap();
    assert_eq!(
        report.outcome,
        StepOutcome::Skipped(SkipReason::NonFiniteGradients)
    );
    assert_eq!(report.loss_scale, Some(65536.0));
    assert_eq!(trainer.loss_scaler().unwrap().scale(), 32768.0);
    assert_eq!(common::params(trainer.model()), before);

    let report = trainer
        .train_batch(batches[1].clone())
        .unwrap()
        .step
        .unwrap();
    assert_eq!(report.outcome, StepOutcome::Applied);
    assert_eq!(report.loss_scale, Some(32768.0));
    assert_ne!(common::params(trainer.model()), before);
    assert!(
        common::params(trainer.model())
            .iter()
            .all(|v| v.is_finite())
    );
    assert_eq!(trainer.counters().skipped_steps, 1);
}

/// Under accumulation each micro-batch's loss is multiplied by the scale over the window size
/// K before its backward pass, as PyTorch's `scaler.scale(loss / K)`, so the scale settles where
/// PyTorch's does: a window of K copies of a batch overflows f16 at K times the scale a single
/// batch overflows at (powers of two: the backward values are the same bits). The step
/// unscales by as much: its gradient norm is f32's.
fn f16_scales_each_micro_batch_by_the_scale_over_the_window<B: AutodiffBackend>(device: B::Device) {
    const K: u32 = 4;
    let batch = common::batches::<B>(1, 8, 4, &device).remove(0);
    let batch = Batch {
        inputs: batch.inputs.mul_scalar(100.0),
        targets: batch.targets,
    };
    // The report of the first window, `k` copies of the batch, at `scale`.
    let first_window = |precision: Precision, scale: f32, k: u32| {
        let config = TrainerConfig::new()
            .with_precision(precision)
            .with_accumulation_steps(k)
            .with_track_grad_norm(true)
            .with_loss_scaler(LossScalerConfig {
                init_scale: scale,
                ..LossScalerConfig::default()
            });
        let mut trainer =
            common::adam_trainer(common::model::<B>(&device, 2), 0.01, config, &device).unwrap();
        let reports: Vec<_> = (0..k)
            .filter_map(|_| trainer.train_batch(batch.clone()).unwrap().step)
            .collect();
        assert_eq!(reports.len(), 1, "one window");
        reports[0]
    };
    let applied = |scale: f32, k: u32| {
        let report = first_window(Precision::F16Mixed, scale, k);
        assert_eq!(report.loss_scale, Some(f64::from(scale)));
        report.outcome == StepOutcome::Applied
    };
    let largest = (0..40)
        .map(|power| 2f32.powi(power))
        .take_while(|&scale| applied(scale, 1))
        .last()
        .expect("the batch trains unscaled");
    assert!(largest < 2f32.powi(39), "the batch never overflows f16");
    let window = K as f32;
    assert!(applied(largest * window, K));
    assert!(!applied(largest * 2.0 * window, K));

    let f16 = first_window(Precision::F16Mixed, largest * window, K);
    let f32 = first_window(Precision::F32, 1.0, K);
    let (f16, f32) = (f16.grad_norm.unwrap(), f32.grad_norm.unwrap());
    assert!(
        (f16 - f32).abs() <= 0.01 * f32,
        "gradient norm {f16} in f16 against {f32} in f32"
    );
}

/// The lazy-parameter trap: a freshly built (lazily initialized) model trained in mixed
/// precision still
/// gets its gradients, because the trainer materializes it before making low-precision copies.
fn lazily_initialized_model_receives_gradients<B: AutodiffBackend>(device: B::Device) {
    let model = Mlp {
        layers: vec![
            LinearConfig::new(common::INPUTS, common::HIDDEN).init::<B>(&device),
            LinearConfig::new(common::HIDDEN, 1).init::<B>(&device),
        ],
        activation: Relu::new(),
        dropout: None,
    };
    let precision = *common::mixed_precisions::<B>(&device).last().unwrap();
    let config = TrainerConfig::new()
        .with_precision(precision)
        .with_track_grad_norm(true);
    let mut trainer = common::adam_trainer(model, 0.01, config, &device).unwrap();
    let before = common::params(trainer.model());
    // f16 may skip its first steps while the 2^16 scale calibrates: look at the first applied.
    let report = common::batches::<B>(6, 8, 4, &device)
        .into_iter()
        .map(|batch| trainer.train_batch(batch).unwrap().step.unwrap())
        .find(|report| report.outcome == StepOutcome::Applied)
        .expect("a step is applied within 6");
    assert!(
        report.grad_norm.unwrap() > 0.0,
        "gradients reached the master"
    );
    let after = common::params(trainer.model());
    assert!(common::max_abs_diff(&before, &after) > 1e-4);
}

crate::backend_tests!(
    mixed_precision_tracks_f32,
    f16_overflow_skips_and_backs_off,
    f16_scales_each_micro_batch_by_the_scale_over_the_window,
    lazily_initialized_model_receives_gradients,
);
