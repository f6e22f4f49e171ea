//! Exact mid-epoch resume with dropout: under `reseed_every_step`, the dropout masks after a
//! resume are the ones the uninterrupted run drew.
//!
//! Dropout draws from the backend's global RNG, which every test thread of a binary shares, so
//! this check lives alone in its own test binary: in the trainer binary, other tests reseeding
//! the backend in parallel would change its masks.

use burn::backend::{Autodiff, Flex};
use burn::lr_scheduler::constant::ConstantLr;
use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_core::{Event, Position};
use kiln_testkit::RecordingObserver;
use kiln_train::{Autocast, Preset, StepOutput, TrainStep, Trainer, TrainerConfig};
use std::sync::Arc;

type B = Autodiff<Flex>;

const INPUTS: usize = 6;
const HIDDEN: usize = 32;
const ROWS: usize = 8;
const BATCHES: usize = 5;

/// Two linear layers with ReLU and dropout between them.
#[derive(Module, Debug)]
struct DropoutMlp<B: Backend> {
    hidden: Linear<B>,
    dropout: Dropout,
    output: Linear<B>,
    activation: Relu,
}

#[derive(Clone, Debug)]
struct Batch<B: Backend> {
    inputs: Tensor<B, 2>,
    targets: Tensor<B, 2>,
}

impl<B: AutodiffBackend> TrainStep<B> for DropoutMlp<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let hidden = self
            .dropout
            .forward(self.activation.forward(self.hidden.forward(batch.inputs)));
        let predictions = autocast.full(self.output.forward(hidden));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
        StepOutput::new(loss, ())
    }

    fn batch_samples(&self, batch: &Batch<B>) -> u64 {
        batch.inputs.dims()[0] as u64
    }
}

/// Deterministic values in [-1, 1) without any RNG.
fn values(count: usize, salt: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 7919 + salt * 104_729) % 2000) as f32 / 1000.0 - 1.0)
        .collect()
}

/// The same weights for every call (set by hand, not from the backend's RNG).
fn model() -> DropoutMlp<B> {
    let device = &Default::default();
    let linear = |inputs: usize, outputs: usize, salt: usize| {
        let mut layer = LinearConfig::new(inputs, outputs).init::<B>(device);
        let scale = 1.0 / (inputs as f32).sqrt();
        let weights = values(inputs * outputs, salt)
            .iter()
            .map(|v| v * scale)
            .collect();
        layer.weight = Param::from_tensor(Tensor::from_data(
            TensorData::new(weights, [inputs, outputs]),
            device,
        ));
        layer.bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(vec![0.0f32; outputs], [outputs]),
            device,
        )));
        layer
    };
    DropoutMlp {
        hidden: linear(INPUTS, HIDDEN, 1),
        dropout: DropoutConfig::new(0.5).init(),
        output: linear(HIDDEN, 1, 2),
        activation: Relu::new(),
    }
}

fn batches() -> Vec<Batch<B>> {
    let device = &Default::default();
    (0..BATCHES)
        .map(|index| Batch {
            inputs: Tensor::from_data(
                TensorData::new(values(ROWS * INPUTS, 10 + index), [ROWS, INPUTS]),
                device,
            ),
            targets: Tensor::from_data(
                TensorData::new(values(ROWS, 20 + index), [ROWS, 1]),
                device,
            ),
        })
        .collect()
}

fn trainer(
    config: TrainerConfig,
) -> Trainer<B, DropoutMlp<B>, impl burn::optim::Optimizer<DropoutMlp<B>, B>, ConstantLr> {
    Trainer::new(
        model(),
        AdamConfig::new().init(),
        ConstantLr::new(0.01),
        config,
        Default::default(),
    )
    .unwrap()
}

/// The epoch's batches from `position` on (the same order every epoch).
fn epoch_data(batches: &[Batch<B>], position: Position) -> Vec<Batch<B>> {
    batches[(position.consumed / ROWS as u64) as usize..].to_vec()
}

fn config(seed: u64) -> TrainerConfig {
    Preset::Reproducible
        .config()
        .with_seed(seed)
        .with_num_epochs(2)
        .with_accumulation_steps(2)
}

/// The step losses of a run, as bits.
fn step_losses(
    trainer: &mut Trainer<
        B,
        DropoutMlp<B>,
        impl burn::optim::Optimizer<DropoutMlp<B>, B>,
        ConstantLr,
    >,
    position_data: &[Batch<B>],
) -> Vec<u64> {
    let recorder = Arc::new(RecordingObserver::new());
    trainer.add_observer(recorder.clone());
    trainer.fit(|p| epoch_data(position_data, p)).unwrap();
    recorder
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::Step(report) => Some(report.loss.expect("the preset reads the loss").to_bits()),
            _ => None,
        })
        .collect()
}

fn params(model: &DropoutMlp<B>) -> Vec<u32> {
    [&model.hidden, &model.output]
        .iter()
        .flat_map(|linear| {
            linear
                .weight
                .val()
                .into_data()
                .iter::<f32>()
                .collect::<Vec<_>>()
        })
        .map(f32::to_bits)
        .collect()
}

#[test]
fn dropout_masks_resume_exactly_under_reseed_every_step() {
    let device = Default::default();
    let data = batches();

    let mut whole = trainer(config(7));
    let whole_losses = step_losses(&mut whole, &data);
    assert_eq!(
        whole_losses.len(),
        6,
        "3 windows per epoch, the last partial"
    );

    // The masks matter: another seed draws other masks, so other losses.
    let mut reseeded = trainer(config(8));
    assert_ne!(step_losses(&mut reseeded, &data), whole_losses);

    // Interrupted after step 4 (mid-epoch 1), resumed from the checkpoint in a fresh trainer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dropout.kiln");
    let mut first = trainer(config(7).with_max_steps(Some(4)));
    let mut losses = step_losses(&mut first, &data);
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = trainer(config(7));
    let position = second.load_checkpoint(&path).unwrap();
    // Draws between loading and training must not matter: the next step reseeds.
    let _ = Tensor::<B, 1>::random([64], burn::tensor::Distribution::Default, &device);
    assert_eq!(
        position,
        Position {
            epoch: 1,
            consumed: 2 * ROWS as u64
        }
    );
    losses.extend(step_losses(&mut second, &data));
    assert_eq!(losses, whole_losses);
    assert_eq!(params(second.model()), params(whole.model()));

    // Without reseeding, the resumed steps draw other masks: what the option is for.
    let plain = |max_steps| {
        config(7)
            .with_reseed_every_step(false)
            .with_max_steps(max_steps)
    };
    let mut whole = trainer(plain(None));
    let whole_losses = step_losses(&mut whole, &data);
    let mut first = trainer(plain(Some(4)));
    let mut losses = step_losses(&mut first, &data);
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = trainer(plain(None));
    second.load_checkpoint(&path).unwrap();
    losses.extend(step_losses(&mut second, &data));
    assert_eq!(losses[..4], whole_losses[..4], "identical up to the cut");
    assert_ne!(losses[4..], whole_losses[4..], "other masks after it");
}
