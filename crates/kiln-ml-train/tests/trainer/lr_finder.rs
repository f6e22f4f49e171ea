//! The learning-rate range test on a real model.

use std::cell::Cell;

use burn::backend::{Autodiff, Flex};
use kiln_ml_train::{LossScalerConfig, LrFinder, Precision, TrainerConfig};

use crate::common;

type B = Autodiff<Flex>;

#[test]
fn the_range_test_suggests_a_rate_before_divergence_and_leaves_the_model_alone() {
    let device = Default::default();
    let model = common::model::<B>(&device, 1);
    let before = common::params(&model);
    let batches = common::batches::<B>(150, 32, 9, &device);
    let finder = LrFinder::new(1e-5, 100.0, 120);
    let finding = finder
        .run(
            model.clone(),
            burn::optim::SgdConfig::new().init(),
            TrainerConfig::new(),
            device,
            batches.into_iter().map(Ok::<_, std::io::Error>),
        )
        .unwrap();
    // SGD at rates near 100 blows the loss up: the sweep stops before its 120 steps.
    assert!(finding.diverged, "{:?}", finding.losses);
    let steps = finding.losses.len();
    assert!(steps > 20 && steps < 120, "{steps} steps");
    // The rates grow by the same factor every step: (100 / 1e-5)^(1/119).
    let factor = (100.0f64 / 1e-5).powf(1.0 / 119.0);
    for pair in finding.learning_rates.windows(2) {
        assert!((pair[1] / pair[0] / factor - 1.0).abs() < 1e-9);
    }
    let suggestion = finding.suggestion.expect("a suggestion");
    let last = *finding.learning_rates.last().unwrap();
    assert!(
        suggestion > 1e-5 && suggestion < last,
        "{suggestion} of {last}"
    );
    // Where the suggestion is, the smoothed loss is falling.
    let at = finding
        .learning_rates
        .iter()
        .position(|lr| *lr == suggestion)
        .unwrap();
    assert!(
        finding.smoothed[at + 1] < finding.smoothed[at - 1],
        "{:?}",
        finding.smoothed
    );
    assert_eq!(
        common::params(&model),
        before,
        "the caller's model was trained"
    );
}

#[test]
fn steps_the_loss_scaler_skips_are_not_sweep_steps() {
    let device = Default::default();
    let batches = common::batches::<B>(150, 32, 9, &device);
    // A first scale of 2^40 overflows f16's gradients until it has backed off far enough.
    let config = TrainerConfig::new()
        .with_precision(Precision::F16Mixed)
        .with_loss_scaler(LossScalerConfig {
            init_scale: 2f32.powi(40),
            ..LossScalerConfig::default()
        });
    let taken = Cell::new(0);
    let finding = LrFinder::new(1e-5, 1e-2, 40)
        .run(
            common::model::<B>(&device, 1),
            burn::optim::SgdConfig::new().init(),
            config,
            device,
            batches
                .into_iter()
                .inspect(|_| taken.set(taken.get() + 1))
                .map(Ok::<_, std::io::Error>),
        )
        .unwrap();
    assert!(
        taken.get() > 50,
        "only {} batches: no step was skipped",
        taken.get()
    );
    // Every one of the 40 sweep steps trained, at the sweep's own rates: skipped steps are
    // neither recorded nor counted.
    assert!(!finding.diverged, "{:?}", finding.losses);
    assert_eq!(finding.losses.len(), 40);
    assert!(finding.losses.iter().all(|loss| loss.is_finite()));
    let factor = (1e-2f64 / 1e-5).powf(1.0 / 39.0);
    for pair in finding.learning_rates.windows(2) {
        assert!(
            (pair[1] / pair[0] / factor - 1.0).abs() < 1e-9,
            "{:?}",
            finding.learning_rates
        );
    }
    assert!((finding.learning_rates[0] / 1e-5 - 1.0).abs() < 1e-9);
    assert!((finding.learning_rates[39] / 1e-2 - 1.0).abs() < 1e-9);
}
