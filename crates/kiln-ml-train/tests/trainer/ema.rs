//! The moving average of the weights: its arithmetic, its validation, its checkpoint.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use kiln_ml_testkit::MeanMetric;
use kiln_ml_train::{EmaConfig, TrainerConfig};

use crate::common;

type B = Autodiff<Flex>;

#[test]
fn the_average_follows_the_weights_every_n_steps_and_survives_a_checkpoint() {
    let device = Default::default();
    let (decay, every) = (0.8, 2);
    let config = TrainerConfig::new().with_ema(Some(EmaConfig::new(decay).with_every_steps(every)));
    let mut trainer = common::sgd_trainer::<B>(&device, 0.05, config.clone());
    assert!(trainer.ema_model().is_none());
    // The average on the host, from the weights after every second step.
    let mut expected: Option<Vec<f32>> = None;
    for (index, batch) in common::batches::<B>(9, 16, 3, &device)
        .into_iter()
        .enumerate()
    {
        trainer.train_batch(batch).unwrap();
        if !(index as u64 + 1).is_multiple_of(every) {
            continue;
        }
        let weights = common::params(trainer.model());
        expected = Some(match expected {
            None => weights,
            Some(average) => average
                .iter()
                .zip(&weights)
                .map(|(average, weight)| decay as f32 * average + (1.0 - decay as f32) * weight)
                .collect(),
        });
    }
    let expected = expected.unwrap();
    // Keeping the average does not change the training itself.
    let mut plain = common::sgd_trainer::<B>(&device, 0.05, TrainerConfig::new());
    for batch in common::batches::<B>(9, 16, 3, &device) {
        plain.train_batch(batch).unwrap();
    }
    assert_eq!(
        common::params(plain.model()),
        common::params(trainer.model())
    );
    let average = common::params(trainer.ema_model().unwrap());
    assert!(common::max_abs_diff(&average, &expected) < 1e-6);
    assert!(common::max_abs_diff(&average, &common::params(trainer.model())) > 1e-4);

    // Validation with the average differs from validation with the weights.
    let valid = common::batches::<Flex>(2, 8, 11, &device);
    let with_weights = trainer
        .validate(valid.clone(), &mut MeanMetric::default())
        .unwrap();
    let with_average = trainer
        .validate_ema(valid.clone(), &mut MeanMetric::default())
        .unwrap()
        .expect("an average");
    assert_ne!(with_weights, with_average);

    // A checkpoint keeps the average.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.kiln");
    trainer.save_checkpoint(&path).unwrap();
    let mut resumed = common::sgd_trainer::<B>(&device, 0.05, config);
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(common::params(resumed.ema_model().unwrap()), average);
    let again = resumed
        .validate_ema(valid, &mut MeanMetric::default())
        .unwrap()
        .unwrap();
    assert_eq!(again, with_average);

    // The average's weights alone, for export, load into a plain model.
    let weights = dir.path().join("ema.mpk");
    assert!(resumed.save_ema_weights(&weights).unwrap());
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let loaded = common::model::<B>(&device, 7)
        .load_file(dir.path().join("ema"), &recorder, &device)
        .unwrap();
    assert_eq!(common::params(&loaded), average);
}
