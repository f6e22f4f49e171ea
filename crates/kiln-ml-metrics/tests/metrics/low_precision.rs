//! Predictions from a mixed-precision model (bf16, f16) against f32 ground truth.

use burn::backend::Flex;
use burn::tensor::{FloatDType, Tensor, TensorData};
use kiln_ml_core::Metric;
use kiln_ml_metrics::{
    BatchShape, MetricsConfig, TensorTrajectoryBatch, TrajectoryBatch, TrajectoryMetrics,
};

/// Values on a 0.25 m grid below 4 m, exact in bf16 and f16, so both paths see the same data.
fn grid(count: usize, stride: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * stride) % 15) as f32 * 0.25)
        .collect()
}

#[test]
fn low_precision_predictions_match_the_host_path_on_f32_truth() {
    let (agents, modes, steps) = (5, 3, 6);
    let predictions = grid(agents * modes * steps * 2, 7);
    let truth = grid(agents * steps * 2, 11);
    let config = MetricsConfig::argoverse2();

    let mut host = TrajectoryMetrics::new(config.clone()).unwrap();
    host.update(
        &TrajectoryBatch::new(BatchShape::new(agents, modes, steps), &predictions, &truth).unwrap(),
    )
    .unwrap();
    let expected = host.compute();

    let device = Default::default();
    for dtype in [FloatDType::BF16, FloatDType::F16] {
        let forecast = Tensor::<Flex, 4>::from_data(
            TensorData::new(predictions.clone(), [agents, modes, steps, 2]),
            &device,
        )
        .cast(dtype);
        let ground_truth = Tensor::<Flex, 3>::from_data(
            TensorData::new(truth.clone(), [agents, steps, 2]),
            &device,
        );
        let mut tensor = TrajectoryMetrics::new(config.clone()).unwrap();
        tensor
            .update(&TensorTrajectoryBatch::new(forecast, ground_truth).unwrap())
            .unwrap();
        let actual = tensor.compute();
        for k in [1, 6] {
            let (want, got) = (
                expected.horizons[0].at(k).unwrap(),
                actual.horizons[0].at(k).unwrap(),
            );
            for (name, want, got) in [
                ("minADE", want.min_ade, got.min_ade),
                ("minFDE", want.min_fde, got.min_fde),
                ("miss rate", want.miss_rate, got.miss_rate),
            ] {
                let (want, got) = (want.unwrap(), got.unwrap());
                assert!(
                    (want - got).abs() <= 1e-5,
                    "{dtype:?} {name}@{k}: host {want}, tensor {got}"
                );
            }
        }
    }
}
