//! Bad input and limits: errors name what was wrong and where; the `ci` preset's handful.

use burn::module::{Module, Param};
use burn::nn::loss::MseLoss;
use burn::optim::SgdConfig;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use kiln_ml_train::{
    Autocast, Error, LossNormalization, Preset, StepOutput, TrainStep, Trainer, TrainerConfig,
};

use crate::common::{self, Batch, Mlp};

/// Returns one loss per row instead of one value.
#[derive(Module, Debug)]
struct Unreduced<B: Backend> {
    inner: Mlp<B>,
}

impl<B: AutodiffBackend> TrainStep<B> for Unreduced<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let rows = batch.inputs.dims()[0];
        let predictions = autocast.full(self.inner.forward(autocast.input(batch.inputs)));
        let losses = MseLoss::new().forward_no_reduction(predictions, batch.targets);
        StepOutput::new(losses.reshape([rows]), ())
    }
}

/// One model cloned into two fields: tied weights under one id.
#[derive(Module, Debug)]
struct Tied<B: Backend> {
    inner: Mlp<B>,
    twin: Mlp<B>,
}

impl<B: AutodiffBackend> TrainStep<B> for Tied<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        self.inner.step(batch, autocast)
    }
}

/// A model that holds one parameter twice is refused by name at `Trainer::new`: kiln's
/// gradient passes would scale and count its gradient once per place.
#[test]
fn tied_parameters_are_refused_by_name() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let mlp = common::model::<B>(&device, 1);
    let tied = Tied {
        inner: mlp.clone(),
        twin: mlp,
    };
    let error = Trainer::new(
        tied,
        SgdConfig::new().init(),
        0.1,
        TrainerConfig::new(),
        device,
    )
    .err()
    .expect("refused");
    assert!(
        matches!(error, Error::TiedParameters { first: 0, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("twice"), "{error}");
}

/// Every `PhaseStart` the recorder saw has its `PhaseEnd`.
fn assert_every_phase_closed(recorder: &kiln_ml_testkit::RecordingObserver) {
    let (mut opened, mut closed) = (0, 0);
    for event in recorder.events() {
        match event {
            kiln_ml_core::Event::PhaseStart { .. } => opened += 1,
            kiln_ml_core::Event::PhaseEnd { .. } => closed += 1,
            _ => {}
        }
    }
    assert!(opened > 0);
    assert_eq!(opened, closed, "every PhaseStart has its PhaseEnd");
}

fn step_output_errors_name_the_step<B: AutodiffBackend>(device: B::Device) {
    let batch = common::batches::<B>(1, 4, 1, &device).remove(0);
    let mut unreduced = Trainer::new(
        Unreduced {
            inner: common::model::<B>(&device, 1),
        },
        SgdConfig::new().init(),
        0.1,
        TrainerConfig::new(),
        device.clone(),
    )
    .unwrap();
    let recorder = common::recorder();
    unreduced.add_observer(recorder.clone());
    let error = unreduced.train_batch(batch.clone()).unwrap_err();
    assert!(
        matches!(&error, Error::LossShape { step: 1, micro_batch: 0, shape } if shape == &[4]),
        "{error}"
    );
    // The failed step still closes every phase it opened.
    assert_every_phase_closed(&recorder);

    let mut items = common::sgd_trainer::<B>(
        &device,
        0.1,
        TrainerConfig::new().with_loss_normalization(LossNormalization::Items),
    );
    let error = items.train_batch(batch).unwrap_err().to_string();
    assert!(
        error.contains("with_items") && error.contains("optimizer step 1"),
        "{error}"
    );
}

/// A finite loss whose gradient is not: `sqrt(p)` at `p = 0` is 0, its derivative is infinite.
/// CPU arithmetic only: Vulkan leaves `1 / 0` undefined and lavapipe returns 0, so this body
/// runs on flex alone (the wgpu tier detects non-finite gradients through f16 overflow).
#[derive(Module, Debug)]
struct InfiniteGradients<B: Backend> {
    inner: Mlp<B>,
    zero: Param<Tensor<B, 1>>,
}

impl<B: AutodiffBackend> TrainStep<B> for InfiniteGradients<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, _autocast: &Autocast) -> StepOutput<B, ()> {
        let outputs = self.inner.forward(batch.inputs);
        let loss = self.zero.val().sqrt().sum() + outputs.sum().mul_scalar(0.0);
        StepOutput::new(loss, ())
    }
}

/// Anomaly detection stops at non-finite gradients, naming the step, and the failed optimizer
/// step still closes its phase.
#[test]
fn non_finite_gradients_close_the_optimizer_phase() {
    type B = burn::backend::Autodiff<burn::backend::Flex>;
    let device = Default::default();
    let batch = common::batches::<B>(1, 4, 1, &device).remove(0);
    let mut trainer = Trainer::new(
        InfiniteGradients {
            inner: common::model::<B>(&device, 1),
            zero: Param::from_tensor(Tensor::zeros([3], &device)),
        },
        SgdConfig::new().init(),
        0.1,
        TrainerConfig::new().with_detect_anomalies(true),
        device,
    )
    .unwrap();
    let recorder = common::recorder();
    trainer.add_observer(recorder.clone());
    let error = trainer.train_batch(batch).unwrap_err();
    assert!(
        matches!(error, Error::NonFiniteGradients { step: 1, .. }),
        "{error}"
    );
    assert_every_phase_closed(&recorder);
}

#[derive(Debug, thiserror::Error)]
#[error("row group 7 of events-003.parquet is truncated")]
struct LoadError;

/// A failing batch stops `fit` with the epoch, the batch and the loader's message.
fn data_errors_name_epoch_and_batch<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(3, 4, 1, &device);
    let mut trainer =
        common::sgd_trainer::<B>(&device, 0.1, TrainerConfig::new().with_num_epochs(2));
    let error = trainer
        .fit(|position| {
            let fail_at = if position.epoch == 1 { 2 } else { usize::MAX };
            Ok::<_, LoadError>(FlakyBatches {
                batches: batches.clone().into_iter().enumerate(),
                fail_at,
                position,
            })
        })
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("epoch 1 at batch 2") && message.contains("events-003.parquet"),
        "{message}"
    );
    assert_eq!(
        trainer.counters().optimizer_steps,
        5,
        "3 steps in epoch 0, 2 in epoch 1"
    );

    // An epoch that fails to open names the epoch too.
    let mut trainer = common::sgd_trainer::<B>(&device, 0.1, TrainerConfig::new());
    let error = trainer
        .fit(|_| Err::<FlakyBatches<B>, _>(LoadError))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Data {
                epoch: 0,
                batch: 0,
                ..
            }
        ),
        "{error}"
    );
}

/// An epoch whose batch `fail_at` fails to load, as a loader's epoch would report it.
struct FlakyBatches<B: AutodiffBackend> {
    batches: std::iter::Enumerate<std::vec::IntoIter<Batch<B>>>,
    fail_at: usize,
    position: kiln_ml_core::Position,
}

impl<B: AutodiffBackend> Iterator for FlakyBatches<B> {
    type Item = Result<Batch<B>, LoadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (index, batch) = self.batches.next()?;
        if index == self.fail_at {
            return Some(Err(LoadError));
        }
        self.position.consumed += batch.len() as u64;
        Some(Ok(batch))
    }
}

impl<B: AutodiffBackend> kiln_ml_core::PositionedBatches for FlakyBatches<B> {
    fn position(&self) -> kiln_ml_core::Position {
        self.position
    }

    fn last_batch_samples(&self) -> u64 {
        4
    }
}

/// The `ci` preset trains a handful of batches per epoch and validates on two.
fn ci_preset_trains_a_handful<B: AutodiffBackend>(device: B::Device) {
    let config = Preset::Ci.config_for::<B>(&device).with_num_epochs(2);
    assert!(config.checkpoint.is_none());
    let mut trainer = common::sgd_trainer::<B>(&device, 0.1, config);
    let batches = common::batches::<B>(10, 4, 1, &device);
    let summary = trainer.fit(|p| common::plain(batches.clone(), p)).unwrap();
    assert_eq!(
        summary.counters.micro_batches, 8,
        "4 batches in each of 2 epochs"
    );
    assert_eq!(summary.position, kiln_ml_core::Position::start_of(2));
    let valid = common::batches::<B::InnerBackend>(10, 4, 2, &device);
    let mut updates = CountUpdates::default();
    assert_eq!(trainer.validate(valid, &mut updates).unwrap(), 2);
}

/// Counts the validation outputs it is given.
#[derive(Default)]
struct CountUpdates(u64);

impl kiln_ml_core::Metric<Vec<f64>> for CountUpdates {
    type Value = u64;
    type Error = std::convert::Infallible;
    fn update(&mut self, _: &Vec<f64>) -> Result<(), Self::Error> {
        self.0 += 1;
        Ok(())
    }
    fn merge(&mut self, other: &Self) {
        self.0 += other.0;
    }
    fn compute(&self) -> u64 {
        self.0
    }
    fn reset(&mut self) {
        self.0 = 0;
    }
}

crate::backend_tests!(
    step_output_errors_name_the_step,
    data_errors_name_epoch_and_batch,
    ci_preset_trains_a_handful,
);
