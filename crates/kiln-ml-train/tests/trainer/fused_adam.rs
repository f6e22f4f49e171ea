//! `FusedAdam` follows Burn's `Adam` and `AdamW` step for step on a model of 24 parameter
//! tensors, in f32 and in the mixed precisions, and resumes from a checkpoint bit for bit.

use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_testkit::MlpConfig;
use kiln_ml_train::{
    AdamWeightDecay, FusedAdamConfig, LossScalerConfig, Precision, Trainer, TrainerConfig,
};

use crate::backend_tests;
use crate::common::*;

const STEPS: usize = 100;
const BATCH: usize = 8;
const LEARNING_RATE: f64 = 1e-2;

backend_tests!(
    fused_adam_follows_burns_adam_and_adamw,
    fused_adam_resumes_bit_for_bit,
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
    let trainer = config(precision)
        .init(
            deep_model::<B>(device),
            optimizer,
            LEARNING_RATE,
            device.clone(),
        )
        .unwrap();
    fitted_params(trainer, batches::<B>(STEPS, BATCH, 7, device), STEPS as u64)
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
            assert!(
                max_abs_diff(&burn, &initial) > 1e-2,
                "{name}, {precision}: training moved the weights"
            );
            let diff = max_abs_diff(&burn, &fused);
            // Where products round to TF32 (CUDA), a last-place difference in one update can
            // round a later product's input the other way: 100 steps amplify it (1.7e-4 seen).
            let tolerance = f32_tolerance::<B>(&device);
            assert!(
                diff <= tolerance,
                "{name}, {precision}: FusedAdam differs from Burn's by {diff} > {tolerance}"
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
