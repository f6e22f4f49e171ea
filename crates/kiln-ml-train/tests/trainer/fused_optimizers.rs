//! `FusedAdam` and `FusedSgd` follow Burn's `Adam`, `AdamW` and `Sgd` step for step on a model
//! of 24 parameter tensors, in f32 and in the mixed precisions, with the trainer's clipping and
//! accumulation done inside their step; they resume from a checkpoint bit for bit, and forget
//! the parameters they keep between steps when the trainer's model changes under them. Under
//! f16, the gradients checked in their buckets skip an overflowing step as Burn's `Adam` does.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{SkipReason, StepOutcome, StepReport};
use kiln_ml_testkit::MlpConfig;
use kiln_ml_train::{
    AdamWeightDecay, FusedAdamConfig, FusedSgdConfig, GradientClipping, LossScalerConfig,
    Precision, SgdMomentum, Trainer, TrainerConfig,
};

use crate::backend_tests;
use crate::common::*;

const STEPS: usize = 100;
const BATCH: usize = 8;
const LEARNING_RATE: f64 = 1e-2;

backend_tests!(
    fused_adam_follows_burns_adam_and_adamw,
    fused_optimizers_clip_and_accumulate_as_the_trainer_does,
    fused_adam_resumes_bit_for_bit,
    fused_optimizers_forget_kept_parameters_when_a_checkpoint_loads,
    fused_adam_continues_from_burns_adam_state,
    fused_adam_skips_an_f16_overflow_as_burns_adam_does,
    a_fused_optimizer_moved_to_a_new_trainer_steps_the_new_model,
);

/// Twelve linear layers: 24 parameter tensors.
fn deep_model<B: burn::tensor::backend::Backend>(device: &B::Device) -> Mlp<B> {
    MlpConfig::new(INPUTS, &[HIDDEN; 11], 1)
        .with_seed(5)
        .init(device)
}

fn config(precision: Precision) -> TrainerConfig {
    TrainerConfig::new()
        .with_num_epochs(1)
        .with_precision(precision)
        // A scale no step overflows at: both runs skip nothing.
        .with_loss_scaler(LossScalerConfig {
            init_scale: 1024.0,
            ..LossScalerConfig::default()
        })
}

/// The parameters after `STEPS` steps of `optimizer` on the deep model.
fn train<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    device: &B::Device,
    precision: Precision,
    optimizer: O,
) -> Vec<f32> {
    train_with(device, config(precision), optimizer)
}

/// A trainer of the deep model under `config`.
fn deep_trainer<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    device: &B::Device,
    config: TrainerConfig,
    optimizer: O,
) -> Trainer<B, Mlp<B>, O, f64> {
    config
        .init(
            deep_model::<B>(device),
            optimizer,
            LEARNING_RATE,
            device.clone(),
        )
        .unwrap()
}

/// The parameters after `STEPS` batches of `optimizer` on the deep model under `config`.
fn train_with<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    device: &B::Device,
    config: TrainerConfig,
    optimizer: O,
) -> Vec<f32> {
    let steps = STEPS as u64 / u64::from(config.accumulation_steps);
    let trainer = deep_trainer(device, config, optimizer);
    fitted_params(trainer, batches::<B>(STEPS, BATCH, 7, device), steps)
}

fn fused_adam_follows_burns_adam_and_adamw<B: AutodiffBackend>(device: B::Device) {
    let initial = params(&deep_model::<B>(&device));
    let mut precisions = vec![Precision::F32];
    precisions.extend(mixed_precisions::<B>(&device));
    for precision in precisions {
        let cases = [
            (
                "adam",
                train::<B, _>(&device, precision, AdamConfig::new().init()),
                FusedAdamConfig::adam(),
            ),
            (
                "adam with L2 decay",
                train::<B, _>(
                    &device,
                    precision,
                    AdamConfig::new()
                        .with_weight_decay(Some(WeightDecayConfig::new(0.05)))
                        .init(),
                ),
                FusedAdamConfig::adam()
                    .with_weight_decay(Some(AdamWeightDecay::L2 { penalty: 0.05 })),
            ),
            (
                "adamw",
                train::<B, _>(
                    &device,
                    precision,
                    AdamWConfig::new().with_weight_decay(0.05).init(),
                ),
                FusedAdamConfig::adamw()
                    .with_weight_decay(Some(AdamWeightDecay::Decoupled { rate: 0.05 })),
            ),
        ];
        for (name, burn, fused) in cases {
            let fused = train::<B, _>(&device, precision, fused.init::<B>());
            let moved = max_abs_diff(&burn, &initial);
            assert!(
                moved > 1e-2,
                "{name}, {precision}: training moved the weights"
            );
            let diff = max_abs_diff(&burn, &fused);
            let tolerance = if precision == Precision::F32 {
                // Where products round to TF32 (CUDA), a last-place difference in one update
                // can round a later product's input the other way: 100 steps amplify it
                // (1.7e-4 seen on an H200).
                f32_tolerance::<B>(&device)
            } else {
                low_precision_tolerance::<B>(&device, moved)
            };
            assert!(
                diff <= tolerance,
                "{name}, {precision}: FusedAdam differs from Burn's by {diff} > {tolerance} \
                 (training moved the weights by {moved})"
            );
        }
    }
}

fn fused_adam_resumes_bit_for_bit<B: AutodiffBackend>(device: B::Device) {
    let data = batches::<B>(STEPS, BATCH, 7, &device);
    let optimizer = || FusedAdamConfig::adamw().init::<B>();
    let trainer = |config: TrainerConfig, seed: u64| -> Trainer<B, Mlp<B>, _, f64> {
        let model = MlpConfig::new(INPUTS, &[HIDDEN; 11], 1)
            .with_seed(seed)
            .init(&device);
        config
            .init(model, optimizer(), LEARNING_RATE, device.clone())
            .unwrap()
    };
    let mut whole = trainer(config(Precision::F32), 5);
    whole.fit(|position| plain(data.clone(), position)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.kiln");
    let mut first = trainer(
        config(Precision::F32).with_max_steps(Some(STEPS as u64 / 2)),
        5,
    );
    first.fit(|position| plain(data.clone(), position)).unwrap();
    first.save_checkpoint(&path).unwrap();
    drop(first);
    // Other weights and a fresh optimizer: everything comes from the checkpoint.
    let mut second = trainer(config(Precision::F32), 99);
    second.load_checkpoint(&path).unwrap();
    let summary = second
        .fit(|position| plain(data.clone(), position))
        .unwrap();
    assert_eq!(summary.counters.optimizer_steps, STEPS as u64);
    assert_eq!(params(second.model()), params(whole.model()));
}

/// With norm clipping that binds and two micro-batches per step, a fused optimizer unscales
/// and clips in its own pass (one reduction over its buckets) where Burn's gets gradients the
/// trainer clipped tensor by tensor: the same parameters, for Adam and for SGD with momentum,
/// Nesterov and weight decay.
fn fused_optimizers_clip_and_accumulate_as_the_trainer_does<B: AutodiffBackend>(device: B::Device) {
    let config = || {
        config(Precision::F32)
            .with_accumulation_steps(2)
            .with_clipping(Some(GradientClipping::Norm { max_norm: 0.05 }))
    };
    let tolerance = f32_tolerance::<B>(&device);
    let initial = params(&deep_model::<B>(&device));

    let burn = train_with::<B, _>(&device, config(), AdamConfig::new().init());
    let fused = train_with::<B, _>(&device, config(), FusedAdamConfig::adam().init::<B>());
    assert!(
        max_abs_diff(&burn, &initial) > 1e-3,
        "Adam moved the weights"
    );
    let diff = max_abs_diff(&burn, &fused);
    assert!(diff <= tolerance, "Adam: {diff} > {tolerance}");

    let momentum = SgdMomentum {
        momentum: 0.8,
        dampening: 0.1,
        nesterov: true,
    };
    let burn_sgd = SgdConfig::new()
        .with_momentum(Some(
            MomentumConfig::new()
                .with_momentum(0.8)
                .with_dampening(0.1)
                .with_nesterov(true),
        ))
        .with_weight_decay(Some(WeightDecayConfig::new(0.01)));
    let fused_sgd = FusedSgdConfig::new()
        .with_momentum(Some(momentum))
        .with_weight_decay(Some(0.01));
    let burn = train_with::<B, _>(&device, config(), burn_sgd.init());
    let fused = train_with::<B, _>(&device, config(), fused_sgd.init::<B>());
    assert!(
        max_abs_diff(&burn, &initial) > 1e-3,
        "SGD moved the weights"
    );
    let diff = max_abs_diff(&burn, &fused);
    assert!(diff <= tolerance, "SGD: {diff} > {tolerance}");
}

/// A fused optimizer keeps the parameter buckets it handed out for its next step; a checkpoint
/// loaded into the same trainer replaces the model, and the next step must start from the
/// loaded weights, not from the buckets of the steps taken since the save.
fn fused_optimizers_forget_kept_parameters_when_a_checkpoint_loads<B: AutodiffBackend>(
    device: B::Device,
) {
    let data = batches::<B>(STEPS, BATCH, 7, &device);
    let half = STEPS as u64 / 2;
    let new_trainer = |config: TrainerConfig| -> Trainer<B, Mlp<B>, _, f64> {
        config
            .init(
                deep_model::<B>(&device),
                FusedSgdConfig::new()
                    .with_momentum(Some(SgdMomentum::default()))
                    .init::<B>(),
                LEARNING_RATE,
                device.clone(),
            )
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.kiln");
    let mut trainer = new_trainer(config(Precision::F32).with_max_steps(Some(half)));
    trainer
        .fit(|position| plain(data.clone(), position))
        .unwrap();
    trainer.save_checkpoint(&path).unwrap();
    // Steps past the save (the optimizer keeps their buckets), then back to the save.
    for batch in data.iter().skip(half as usize).take(5) {
        trainer.train_batch(batch.clone()).unwrap();
    }
    trainer.load_checkpoint(&path).unwrap();
    let mut resumed = new_trainer(config(Precision::F32));
    resumed.load_checkpoint(&path).unwrap();
    for batch in data.iter().skip(half as usize) {
        resumed.train_batch(batch.clone()).unwrap();
    }
    for batch in data.iter().skip(half as usize) {
        trainer.train_batch(batch.clone()).unwrap();
    }
    assert_eq!(params(trainer.model()), params(resumed.model()));
}

/// A fused optimizer cloned from one trainer into a new one does not take the parameters it
/// kept for the new trainer's model, though their ids match (a copy rolled back to the start).
fn a_fused_optimizer_moved_to_a_new_trainer_steps_the_new_model<B: AutodiffBackend>(
    device: B::Device,
) {
    let data = batches::<B>(6, BATCH, 7, &device);
    let start = deep_model::<B>(&device);
    let trainer = |optimizer| -> Trainer<B, Mlp<B>, _, f64> {
        config(Precision::F32)
            .init(start.clone(), optimizer, LEARNING_RATE, device.clone())
            .unwrap()
    };
    let mut first = trainer(FusedSgdConfig::new().init::<B>());
    for batch in &data[..5] {
        first.train_batch(batch.clone()).unwrap();
    }
    let mut moved = trainer(first.optimizer().clone());
    moved.train_batch(data[5].clone()).unwrap();
    let mut fresh = trainer(FusedSgdConfig::new().init::<B>());
    fresh.train_batch(data[5].clone()).unwrap();
    assert_eq!(params(moved.model()), params(fresh.model()));
}

/// Half a run with Burn's Adam, the other half with `FusedAdam` carrying Burn's moments over:
/// the same parameters as Burn's Adam all the way (a restart of the moments would not be).
fn fused_adam_continues_from_burns_adam_state<B: AutodiffBackend>(device: B::Device) {
    use burn::nn::loss::{MseLoss, Reduction};
    use burn::optim::GradientsParams;
    let data = batches::<B>(20, BATCH, 7, &device);
    let step = |model: Mlp<B>, optimizer: &mut dyn FnMut(Mlp<B>, GradientsParams) -> Mlp<B>| {
        data.iter().fold(model, |model, batch| {
            let predictions = model.forward(batch.inputs.clone());
            let loss = MseLoss::new().forward(predictions, batch.targets.clone(), Reduction::Mean);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            optimizer(model, grads)
        })
    };
    let mut burn = AdamConfig::new().init::<B, Mlp<B>>();
    let halfway = step(deep_model::<B>(&device), &mut |model, grads| {
        burn.step(LEARNING_RATE, model, grads)
    });
    let record = burn.to_record();
    let all_burn = step(halfway.clone(), &mut |model, grads| {
        burn.step(LEARNING_RATE, model, grads)
    });
    let mut fused = FusedAdamConfig::adam()
        .init::<B>()
        .with_burn_adam_state(&halfway, record)
        .unwrap();
    assert_eq!(fused.steps(), data.len());
    let then_fused = step(halfway.clone(), &mut |model, grads| {
        fused.step(LEARNING_RATE, model, grads)
    });
    let mut restarted = FusedAdamConfig::adam().init::<B>();
    let restarted = step(halfway, &mut |model, grads| {
        restarted.step(LEARNING_RATE, model, grads)
    });
    let tolerance = f32_tolerance::<B>(&device);
    let diff = max_abs_diff(&params(&all_burn), &params(&then_fused));
    assert!(diff <= tolerance, "carried over: {diff} > {tolerance}");
    let restart_diff = max_abs_diff(&params(&all_burn), &params(&restarted));
    assert!(
        restart_diff > 10.0 * tolerance,
        "a restart differs visibly: {restart_diff}"
    );
}

/// AMSGrad keeps a running maximum of the second moment that `FusedAdam` has no place for:
/// taking over such a state is refused, not continued as plain Adam.
#[test]
fn burns_amsgrad_state_is_refused() {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::loss::{MseLoss, Reduction};
    use burn::optim::GradientsParams;
    type B = Autodiff<Flex>;
    let device = Default::default();
    let batch = batches::<B>(1, BATCH, 7, &device).remove(0);
    let model = deep_model::<B>(&device);
    let predictions = model.forward(batch.inputs.clone());
    let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let mut burn = AdamConfig::new().with_amsgrad(true).init::<B, Mlp<B>>();
    let stepped = burn.step(LEARNING_RATE, model, grads);
    let error = FusedAdamConfig::adam()
        .init::<B>()
        .with_burn_adam_state(&stepped, burn.to_record())
        .err()
        .expect("refused");
    assert!(error.to_string().contains("AMSGrad"), "{error}");
}

/// The step reports and final parameters of an f16 run of `optimizer` whose third batch
/// overflows f16 at PyTorch's starting scale (2^16).
fn f16_run_with_an_overflow<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    device: &B::Device,
    optimizer: O,
) -> (Vec<StepReport>, Vec<f32>) {
    let config = config(Precision::F16Mixed)
        .with_loss_scaler(LossScalerConfig::default())
        .with_track_grad_norm(true)
        .with_clipping(Some(GradientClipping::Norm { max_norm: 1.0 }));
    let mut trainer = deep_trainer(device, config, optimizer);
    let mut batches = batches::<B>(6, BATCH, 11, device);
    // Targets 100x: a finite loss whose scaled gradients overflow f16.
    batches[2].targets = batches[2].targets.clone().mul_scalar(100.0);
    let reports = batches
        .into_iter()
        .map(|batch| trainer.train_batch(batch).unwrap().step.unwrap())
        .collect();
    (reports, params(trainer.model()))
}

/// After its first step a fused optimizer gets its gradients in its buckets from the trainer,
/// which reads their norm there: an f16 overflow mid-run is skipped as under Burn's `Adam` (same
/// outcomes, scales and norms), and the weights stay equal.
fn fused_adam_skips_an_f16_overflow_as_burns_adam_does<B: AutodiffBackend>(device: B::Device) {
    if !mixed_precisions::<B>(&device).contains(&Precision::F16Mixed) {
        return; // refused on this backend (checked by `mixed_precisions`)
    }
    let (burn_reports, burn) = f16_run_with_an_overflow::<B, _>(&device, AdamConfig::new().init());
    let (fused_reports, fused) =
        f16_run_with_an_overflow::<B, _>(&device, FusedAdamConfig::adam().init::<B>());
    let outcomes = |reports: &[StepReport]| -> Vec<StepOutcome> {
        reports.iter().map(|report| report.outcome).collect()
    };
    assert_eq!(
        outcomes(&fused_reports)[2],
        StepOutcome::Skipped(SkipReason::NonFiniteGradients)
    );
    assert_eq!(outcomes(&fused_reports), outcomes(&burn_reports));
    for (fused, burn) in fused_reports.iter().zip(&burn_reports) {
        assert_eq!(fused.loss_scale, burn.loss_scale, "step {}", fused.step);
        let (fused_norm, burn_norm) = (fused.grad_norm.unwrap(), burn.grad_norm.unwrap());
        if burn_norm.is_finite() {
            let relative = (fused_norm - burn_norm).abs() / burn_norm;
            assert!(
                relative < 1e-4,
                "step {}: {fused_norm} vs {burn_norm}",
                fused.step
            );
        } else {
            assert!(!fused_norm.is_finite(), "step {}: {fused_norm}", fused.step);
        }
    }
    let diff = max_abs_diff(&burn, &fused);
    let tolerance = f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "FusedAdam differs from Burn's by {diff} > {tolerance}"
    );
}
