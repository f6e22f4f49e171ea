//! Global-norm clipping: PyTorch's formula over all parameters at once, after unscaling.

use burn::module::{Module, Param};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use kiln_ml_train::{
    FusedSgdConfig, GradientClipping, LossScalerConfig, Precision, Trainer, TrainerConfig,
    clip_grad_norm, global_grad_norm,
};

use crate::common;

/// Two parameters whose gradients are known exactly.
#[derive(Module, Debug)]
struct Pair<B: Backend> {
    a: Param<Tensor<B, 1>>,
    b: Param<Tensor<B, 1>>,
}

/// Gradients (4, 4) and (4, 0): norms 5.66 and 4, global norm sqrt(48) = 6.93. PyTorch scales
/// both by 1 / (6.93 + 1e-6) for `max_norm = 1`; Burn's per-parameter clipping would scale
/// them separately to norm 1 each.
fn global_norm_matches_pytorch_formula<B: AutodiffBackend>(device: B::Device) {
    let pair = Pair::<B> {
        a: Param::from_tensor(Tensor::zeros([2], &device)),
        b: Param::from_tensor(Tensor::zeros([2], &device)),
    };
    let coefficients =
        |values: [f32; 2]| Tensor::<B, 1>::from_data(TensorData::from(values), &device);
    let loss = (pair.a.val() * coefficients([4.0, 4.0])).sum()
        + (pair.b.val() * coefficients([4.0, 0.0])).sum();
    let mut grads = GradientsParams::from_grads(loss.backward(), &pair);

    let total = 48f64.sqrt();
    let norm = global_grad_norm::<B, _>(&pair, &grads).unwrap();
    assert!((norm - total).abs() < 1e-5, "{norm}");
    let returned = clip_grad_norm::<B, _>(&pair, &mut grads, 1.0).unwrap();
    assert!((returned - total).abs() < 1e-5, "returns the pre-clip norm");

    let coefficient = 1.0 / (total + 1e-6);
    let a: Vec<f32> = grads
        .get::<B::InnerBackend, 1>(pair.a.id)
        .unwrap()
        .into_data()
        .iter::<f32>()
        .collect();
    let b: Vec<f32> = grads
        .get::<B::InnerBackend, 1>(pair.b.id)
        .unwrap()
        .into_data()
        .iter::<f32>()
        .collect();
    for (got, want) in a.iter().chain(&b).zip([4.0, 4.0, 4.0, 0.0]) {
        assert!(
            (f64::from(*got) - want * coefficient).abs() < 1e-6,
            "{a:?} {b:?}"
        );
    }
    let clipped = global_grad_norm::<B, _>(&pair, &grads).unwrap();
    assert!(
        (clipped - 1.0).abs() < 1e-5,
        "global norm after clipping {clipped}"
    );

    // Under the threshold nothing changes.
    let before = global_grad_norm::<B, _>(&pair, &grads).unwrap();
    clip_grad_norm::<B, _>(&pair, &mut grads, 10.0).unwrap();
    assert_eq!(global_grad_norm::<B, _>(&pair, &grads).unwrap(), before);
}

/// In the trainer, clipping acts on unscaled gradients: an f16 run with a loss scale of 2^16
/// and an f32 run clip to the same update, and the reported norm is the unscaled pre-clip norm.
fn trainer_clips_after_unscaling<B: AutodiffBackend>(device: B::Device) {
    let batch = common::batches::<B>(1, 16, 9, &device).remove(0);
    let run = |precision: Precision, clipping: Option<GradientClipping>| {
        let config = TrainerConfig::new()
            .with_precision(precision)
            .with_track_grad_norm(true)
            .with_loss_scaler(LossScalerConfig {
                init_scale: 1024.0,
                ..Default::default()
            })
            .with_clipping(clipping);
        let mut trainer = Trainer::new(
            common::model::<B>(&device, 4),
            SgdConfig::new().init(),
            0.1,
            config,
            device.clone(),
        )
        .unwrap();
        let before = common::params(trainer.model());
        let report = trainer.train_batch(batch.clone()).unwrap().step.unwrap();
        let after = common::params(trainer.model());
        let update: f64 = before
            .iter()
            .zip(&after)
            .map(|(b, a)| f64::from(b - a).powi(2))
            .sum::<f64>()
            .sqrt();
        (report, update)
    };
    let (free, free_update) = run(Precision::F32, None);
    let norm = free.grad_norm.unwrap();
    assert!(
        norm > 0.5,
        "the test needs a gradient norm above the threshold, got {norm}"
    );
    assert!((free_update - 0.1 * norm).abs() < 1e-4 * norm);

    let clip = Some(GradientClipping::Norm { max_norm: 0.5 });
    let (clipped, clipped_update) = run(Precision::F32, clip);
    assert_eq!(
        clipped.grad_norm, free.grad_norm,
        "reports the pre-clip norm"
    );
    assert!(
        (clipped_update - 0.1 * 0.5).abs() < 1e-5,
        "{clipped_update}"
    );

    let (scaled, scaled_update) = run(Precision::F16Mixed, clip);
    assert_eq!(scaled.outcome, kiln_ml_core::StepOutcome::Applied);
    assert_eq!(scaled.loss_scale, Some(1024.0));
    let scaled_norm = scaled.grad_norm.unwrap();
    assert!(
        (scaled_norm - norm).abs() < 0.02 * norm,
        "{scaled_norm} vs {norm}"
    );
    assert!((scaled_update - 0.1 * 0.5).abs() < 1e-3, "{scaled_update}");

    // Value clipping clamps every element.
    let (_, value_update) = run(
        Precision::F32,
        Some(GradientClipping::Value { max_abs: 1e-3 }),
    );
    let elements = common::params(&common::model::<B>(&device, 4)).len() as f64;
    assert!(value_update <= 0.1 * 1e-3 * elements.sqrt() + 1e-7);
}

/// Two runs of one seed clip every step by the same coefficient, to the bit, with Burn's SGD
/// (the trainer clips) and kiln's fused SGD (it clips over its buckets): the global norm is
/// summed in a fixed order. Burn's `Tensor::sum` adds partial sums with atomics on CUDA and
/// wgpu, so a norm summed with it may differ in its last bit from run to run, and so would every
/// weight after the first clipped step. Layers of 512 units give gradients large enough for
/// such a sum to vary on lavapipe.
fn clipped_runs_repeat_bit_for_bit<B: AutodiffBackend>(device: B::Device) {
    let batches = common::batches::<B>(12, 64, 3, &device);
    let burn = || clipped_run(&device, &batches, SgdConfig::new().init());
    let fused = || clipped_run(&device, &batches, FusedSgdConfig::new().init::<B>());
    for (optimizer, first, second) in [("SGD", burn(), burn()), ("FusedSgd", fused(), fused())] {
        let ((first, first_norms), (second, second_norms)) = (first, second);
        assert!(
            first_norms
                .iter()
                .all(|norm| *norm > 10.0 * CLIPPED_RUN_MAX_NORM),
            "{optimizer}: every step must clip: {first_norms:?}"
        );
        assert_eq!(
            first_norms, second_norms,
            "{optimizer}: the same pre-clip norms"
        );
        let differing = first
            .iter()
            .zip(&second)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differing,
            0,
            "{optimizer}: {differing} of {} weights differ between two runs of one seed",
            first.len()
        );
    }
}

const CLIPPED_RUN_MAX_NORM: f64 = 1e-3;

/// One epoch over `batches` from seeded weights, clipped to [`CLIPPED_RUN_MAX_NORM`]: the
/// weights after it and each step's pre-clip norm.
fn clipped_run<B, O>(
    device: &B::Device,
    batches: &[common::Batch<B>],
    optimizer: O,
) -> (Vec<f32>, Vec<f64>)
where
    B: AutodiffBackend,
    O: burn::optim::Optimizer<kiln_ml_testkit::Mlp<B>, B>,
{
    let observer = common::recorder();
    let config = TrainerConfig::new()
        .with_track_grad_norm(true)
        .with_clipping(Some(GradientClipping::Norm {
            max_norm: CLIPPED_RUN_MAX_NORM,
        }));
    let model = kiln_ml_testkit::MlpConfig::new(common::INPUTS, &[512, 512], 1)
        .with_seed(5)
        .init(device);
    let trainer = Trainer::new(model, optimizer, 0.5, config, device.clone())
        .unwrap()
        .with_observer(observer.clone());
    let params = common::fitted_params(trainer, batches.to_vec(), batches.len() as u64);
    let norms = common::step_reports(&observer)
        .iter()
        .map(|report| report.grad_norm.unwrap())
        .collect();
    (params, norms)
}

crate::backend_tests!(
    global_norm_matches_pytorch_formula,
    trainer_clips_after_unscaling,
    clipped_runs_repeat_bit_for_bit
);
