//! Gradient accumulation: K micro-batches equal one big batch, partial windows divide by
//! their own size, and the scheduler steps once per optimizer step.

use burn::nn::loss::{MseLoss, Reduction};
use burn::optim::SgdConfig;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_train::{Autocast, LossNormalization, StepOutput, TrainStep, Trainer, TrainerConfig};

use crate::common::{self, Batch, Mlp};

const LEARNING_RATE: f64 = 0.1;

fn trainer<B: AutodiffBackend>(
    device: &B::Device,
    accumulation: u32,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64> {
    let config = TrainerConfig::new()
        .with_accumulation_steps(accumulation)
        .with_track_grad_norm(true);
    Trainer::new(
        common::model::<B>(device, 3),
        SgdConfig::new().init(),
        LEARNING_RATE,
        config,
        device.clone(),
    )
    .unwrap()
}

/// Whether two figures agree within `tolerance` (`common::f32_tolerance`): absolutely, or
/// relative above 1 where products round to TF32 (its tolerance being a relative error).
fn close(left: f64, right: f64, tolerance: f32) -> bool {
    let scale = if tolerance > 1e-5 {
        right.abs().max(1.0)
    } else {
        1.0
    };
    (left - right).abs() <= f64::from(tolerance) * scale
}

/// Four micro-batches of 8 rows and one batch of 32 rows give the same parameters after
/// several optimizer steps.
fn accumulated_equals_large_batch<B: AutodiffBackend>(device: B::Device) {
    let (inputs, targets) = common::rows(32 * 5, 11);
    let tolerance = common::f32_tolerance::<B>(&device);
    let mut small = trainer::<B>(&device, 4);
    let mut large = trainer::<B>(&device, 1);
    for step in 0..5 {
        let rows = step * 32..(step + 1) * 32;
        let big = common::batch::<B>(
            &inputs[rows.start * common::INPUTS..rows.end * common::INPUTS],
            &targets[rows.clone()],
            &device,
        );
        let big_report = large.train_batch(big).unwrap().step.unwrap();
        for micro in 0..4 {
            let start = rows.start + micro * 8;
            let outcome = small
                .train_batch(common::batch::<B>(
                    &inputs[start * common::INPUTS..(start + 8) * common::INPUTS],
                    &targets[start..start + 8],
                    &device,
                ))
                .unwrap();
            assert_eq!(
                outcome.step.is_some(),
                micro == 3,
                "step only on the 4th micro-batch"
            );
            if let Some(report) = outcome.step {
                let losses = (report.loss.unwrap(), big_report.loss.unwrap());
                assert!(close(losses.0, losses.1, tolerance), "{losses:?}");
                let norms = (report.grad_norm.unwrap(), big_report.grad_norm.unwrap());
                assert!(close(norms.0, norms.1, tolerance), "{norms:?}");
            }
        }
    }
    let diff = common::max_abs_diff(
        &common::params(small.model()),
        &common::params(large.model()),
    );
    assert!(
        diff <= tolerance,
        "max parameter difference {diff} > {tolerance}"
    );
    assert_eq!(small.counters().optimizer_steps, 5);
    assert_eq!(small.counters().micro_batches, 20);
}

/// An epoch of 6 micro-batches with K = 4 makes two steps; the second averages 2 micro-batches
/// (not 4), so it equals one step on those 16 rows.
fn partial_window_divides_by_its_own_size<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(6, 8, 21, &device);
    let mut accumulated = trainer::<B>(&device, 4);
    let recorder = common::recorder();
    accumulated.add_observer(recorder.clone());
    accumulated
        .fit(|p| common::plain(batches.clone(), p))
        .unwrap();
    assert_eq!(accumulated.counters().optimizer_steps, 2);
    assert_eq!(accumulated.counters().micro_batches, 6);
    assert_eq!(accumulated.position().epoch, 1);

    // Reference: one step on rows 0..32, then one on rows 32..48.
    let (inputs, targets) = common::rows(48, 21);
    let mut reference = trainer::<B>(&device, 1);
    for rows in [0..32, 32..48] {
        reference
            .train_batch(common::batch::<B>(
                &inputs[rows.start * common::INPUTS..rows.end * common::INPUTS],
                &targets[rows],
                &device,
            ))
            .unwrap();
    }
    let diff = common::max_abs_diff(
        &common::params(accumulated.model()),
        &common::params(reference.model()),
    );
    let tolerance = common::f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "max parameter difference {diff} > {tolerance}"
    );
    let reports = common::step_reports(&recorder);
    assert_eq!(reports.len(), 2, "one report per optimizer step");
}

/// With a learning-rate schedule, accumulation advances it once per optimizer step.
fn scheduler_steps_once_per_optimizer_step<B: AutodiffBackend>(device: B::Device) {
    use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
    let scheduler = LinearLrSchedulerConfig::new(0.5, 0.1, 4).init().unwrap();
    let config = TrainerConfig::new().with_accumulation_steps(3);
    let mut trainer = Trainer::new(
        common::model::<B>(&device, 3),
        SgdConfig::new().init(),
        scheduler,
        config,
        device.clone(),
    )
    .unwrap();
    let recorder = common::recorder();
    trainer.add_observer(recorder.clone());
    let batches = common::batches::<B>(9, 4, 5, &device);
    trainer.fit(|p| common::plain(batches.clone(), p)).unwrap();
    let rates: Vec<f64> = common::step_reports(&recorder)
        .iter()
        .map(|report| report.learning_rate)
        .collect();
    assert_eq!(rates.len(), 3);
    for (got, expected) in rates.iter().zip([0.5, 0.4, 0.3]) {
        assert!((got - expected).abs() < 1e-12, "{rates:?}");
    }
}

/// A trainer of `model` by SGD with item normalization, `accumulation` micro-batches a step.
fn items_trainer<B, M>(
    model: M,
    accumulation: u32,
    device: &B::Device,
) -> Trainer<B, M, impl burn::optim::Optimizer<M, B>, f64>
where
    B: AutodiffBackend,
    M: burn::module::AutodiffModule<B> + TrainStep<B>,
{
    let config = TrainerConfig::new()
        .with_accumulation_steps(accumulation)
        .with_loss_normalization(LossNormalization::Items);
    Trainer::new(
        model,
        SgdConfig::new().init(),
        LEARNING_RATE,
        config,
        device.clone(),
    )
    .unwrap()
}

/// A model whose loss is a sum over rows and reports its row count.
#[derive(burn::module::Module, Debug)]
struct SumMlp<B: burn::tensor::backend::Backend> {
    inner: Mlp<B>,
}

impl<B: AutodiffBackend> TrainStep<B> for SumMlp<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let rows = batch.inputs.dims()[0] as u64;
        let predictions = autocast.full(self.inner.forward(autocast.input(batch.inputs)));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Sum);
        StepOutput::new(loss, ()).with_items(rows)
    }
}

/// Normalizing by items weighs every row equally however rows are split into micro-batches:
/// micro-batches of 3, 9 and 4 rows equal one batch of 16 rows.
fn item_normalization_weighs_rows_equally<B: AutodiffBackend>(device: B::Device) {
    let (inputs, targets) = common::rows(16, 8);
    let build = |accumulation| {
        let model = SumMlp {
            inner: common::model::<B>(&device, 3),
        };
        items_trainer(model, accumulation, &device)
    };
    let mut uneven = build(3);
    for rows in [0..3, 3..12, 12..16] {
        uneven
            .train_batch(common::batch::<B>(
                &inputs[rows.start * common::INPUTS..rows.end * common::INPUTS],
                &targets[rows],
                &device,
            ))
            .unwrap();
    }
    let mut whole = build(1);
    let report = whole
        .train_batch(common::batch::<B>(&inputs, &targets, &device))
        .unwrap()
        .step
        .unwrap();
    let diff = common::max_abs_diff(
        &common::params(&uneven.model().inner),
        &common::params(&whole.model().inner),
    );
    let tolerance = common::f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "max parameter difference {diff} > {tolerance}"
    );
    // f32 steps read nothing back by default; the loss comes when asked for.
    assert_eq!(report.loss, None);
    let (uneven_loss, whole_loss) = (uneven.last_loss().unwrap(), whole.last_loss().unwrap());
    let losses = (uneven_loss.unwrap(), whole_loss.unwrap());
    assert!(close(losses.0, losses.1, tolerance), "{losses:?}");
}

/// A model trained on padded batches: rows after a batch's real ones are padding (finite junk),
/// masked out by `StepOutput::masked_sum`, the real rows counted as items.
#[derive(burn::module::Module, Debug)]
struct MaskedMlp<B: burn::tensor::backend::Backend> {
    inner: Mlp<B>,
}

/// A padded batch: rows, their mask (`true` for a real row) and the real rows' count.
#[derive(Debug, Clone)]
struct PaddedRows<B: burn::tensor::backend::Backend> {
    rows: Batch<B>,
    mask: burn::tensor::Tensor<B, 2, burn::tensor::Bool>,
    real: u64,
}

impl<B: AutodiffBackend> TrainStep<B> for MaskedMlp<B> {
    type Input = PaddedRows<B>;
    type Output = ();

    fn step(&self, batch: PaddedRows<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.inner.forward(autocast.input(batch.rows.inputs)));
        let per_row = (predictions - batch.rows.targets).powi_scalar(2);
        StepOutput::masked_sum(per_row, batch.mask, batch.real, ())
    }
}

/// Samples of different sizes, padded per micro-batch to its longest (here: to a fixed row
/// count with junk rows), train as the unpadded rows do: micro-batches of 3, 9 and 4 real rows
/// padded to 8, 9 and 6 equal one batch of the 16 rows, with item normalization.
fn masked_padded_batches_train_as_the_unpadded_rows<B: AutodiffBackend>(device: B::Device) {
    let (inputs, targets) = common::rows(16, 8);
    let build = |accumulation| {
        let model = MaskedMlp {
            inner: common::model::<B>(&device, 3),
        };
        items_trainer(model, accumulation, &device)
    };
    let padded = |rows: std::ops::Range<usize>, padded_to: usize| {
        let real = rows.len();
        let mut batch_inputs =
            inputs[rows.start * common::INPUTS..rows.end * common::INPUTS].to_vec();
        let mut batch_targets = targets[rows].to_vec();
        // Junk that would move the weights a lot if it counted.
        batch_inputs.resize(padded_to * common::INPUTS, 3.0);
        batch_targets.resize(padded_to, -50.0);
        let mask: Vec<bool> = (0..padded_to).map(|row| row < real).collect();
        PaddedRows {
            rows: common::batch::<B>(&batch_inputs, &batch_targets, &device),
            mask: burn::tensor::Tensor::from_data(
                burn::tensor::TensorData::new(mask, [padded_to, 1]),
                &device,
            ),
            real: real as u64,
        }
    };
    let mut micro = build(3);
    for (rows, padded_to) in [(0..3, 8), (3..12, 9), (12..16, 6)] {
        micro.train_batch(padded(rows, padded_to)).unwrap();
    }
    let mut whole = build(1);
    whole.train_batch(padded(0..16, 16)).unwrap();
    let diff = common::max_abs_diff(
        &common::params(&micro.model().inner),
        &common::params(&whole.model().inner),
    );
    let tolerance = common::f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "max parameter difference {diff} > {tolerance}"
    );
    // The padding would count without the mask.
    let mut unmasked = build(3);
    for (rows, padded_to) in [(0..3, 8), (3..12, 9), (12..16, 6)] {
        let mut batch = padded(rows, padded_to);
        batch.mask = batch.mask.clone().bool_not().bool_or(batch.mask);
        unmasked.train_batch(batch).unwrap();
    }
    let diff = common::max_abs_diff(
        &common::params(&unmasked.model().inner),
        &common::params(&whole.model().inner),
    );
    assert!(
        diff > 100.0 * tolerance,
        "the padding moved nothing: {diff}"
    );
}

crate::backend_tests!(
    accumulated_equals_large_batch,
    partial_window_divides_by_its_own_size,
    scheduler_steps_once_per_optimizer_step,
    item_normalization_weighs_rows_equally,
    masked_padded_batches_train_as_the_unpadded_rows,
);
