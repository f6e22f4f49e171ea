//! Validation without autodiff, feeding a kiln-ml-core `Metric`.

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::Metric;
use kiln_ml_testkit::MeanMetric;
use kiln_ml_train::TrainerConfig;

use crate::common;

fn validation_feeds_metrics<B: AutodiffBackend>(device: B::Device) {
    let config = TrainerConfig::new().with_max_validation_batches(Some(3));
    let trainer = common::sgd_trainer::<B>(&device, 0.01, config);
    let batches = common::batches::<B::InnerBackend>(5, 4, 8, &device);

    // Reference: the mean squared error of the first 3 batches, computed directly.
    let model = trainer.model().valid();
    let squared_errors = |batches: &[common::Batch<B::InnerBackend>]| -> Vec<f64> {
        let mut errors = Vec::new();
        for batch in batches {
            let predictions = model.forward(batch.inputs.clone());
            let squared = (predictions - batch.targets.clone()).powi_scalar(2);
            errors.extend(squared.into_data().iter::<f64>());
        }
        errors
    };
    let mean = |errors: &[f64]| errors.iter().sum::<f64>() / errors.len() as f64;
    let mut errors = squared_errors(&batches[..3]);
    let expected = mean(&errors);

    let mut metric = MeanMetric::default();
    let value = trainer
        .validate(batches.clone(), &mut metric)
        .unwrap()
        .unwrap();
    assert!((value - expected).abs() < 1e-9, "{value} vs {expected}");
    // The metric accumulates across calls until reset: the other two batches added to the
    // first three give the mean of all five.
    trainer
        .validate(batches[3..].to_vec(), &mut metric)
        .unwrap();
    errors.extend(squared_errors(&batches[3..]));
    let all = mean(&errors);
    assert!((metric.compute().unwrap() - all).abs() < 1e-9);
    assert!(
        (all - expected).abs() > 1e-6,
        "the two means must differ to tell"
    );
    metric.reset();
    assert_eq!(metric.compute(), None);

    // Under mixed precision (bf16 where the device has it) the outputs differ a little.
    let precision = *common::mixed_precisions::<B>(&device).last().unwrap();
    let mixed = common::sgd_trainer::<B>(
        &device,
        0.01,
        TrainerConfig::new()
            .with_precision(precision)
            .with_max_validation_batches(Some(3)),
    );
    let low = mixed
        .validate(batches.clone(), &mut metric)
        .unwrap()
        .unwrap();
    assert!(low.is_finite());
    // The same 3 batches: low-precision rounding moves the error, but only a little.
    assert_ne!(low, expected, "validation ran in {precision}");
    assert!(
        (low - expected).abs() < 0.05 * expected,
        "{low} vs {expected}"
    );
}

/// A metric error names the validation batch.
fn metric_errors_name_the_batch<B: AutodiffBackend>(device: B::Device) {
    let trainer = common::sgd_trainer::<B>(&device, 0.01, TrainerConfig::new());
    let mut batches = common::batches::<B::InnerBackend>(3, 4, 8, &device);
    batches[2].targets = batches[2].targets.clone().mul_scalar(f32::NAN);
    let error = trainer
        .validate(batches, &mut MeanMetric::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("validation batch 2"), "{error}");
}

crate::backend_tests!(validation_feeds_metrics, metric_errors_name_the_batch);

/// A pass that fails (a metric refusing a value) still ends its phase for the observers.
#[test]
fn a_failed_validation_pass_closes_its_phase() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let mut trainer = common::sgd_trainer::<B>(&device, 0.01, TrainerConfig::new());
    let recorder = common::recorder();
    trainer.add_observer(recorder.clone());
    let (inputs, mut targets) = common::rows(4, 3);
    targets[0] = f32::NAN;
    let batches = vec![common::batch::<burn::backend::Flex>(
        &inputs, &targets, &device,
    )];
    assert!(
        trainer
            .validate(batches, &mut MeanMetric::default())
            .is_err()
    );
    let events = recorder.events();
    let opened = events
        .iter()
        .filter(|event| matches!(event, kiln_ml_core::Event::PhaseStart { .. }))
        .count();
    let closed = events
        .iter()
        .filter(|event| matches!(event, kiln_ml_core::Event::PhaseEnd { .. }))
        .count();
    assert_eq!((opened, closed), (1, 1));
}
