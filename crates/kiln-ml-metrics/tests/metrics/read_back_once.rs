//! `DeviceTrajectoryMetrics` reads a whole pass back at once: the plain tensor path's values
//! bit for bit, an invalid batch named at the read-back with its index, a bounded number of
//! batches in flight.

use crate::common;

use common::Case;
use kiln_ml_core::Metric;
use kiln_ml_metrics::{DeviceTrajectoryMetrics, Error, MetricsConfig, TrajectoryMetrics};

/// Agents whose forecasts are the truth shifted by a different amount per batch and mode.
fn batch(shift: f32) -> Case {
    let truth: Vec<Vec<[f32; 2]>> = (0..5)
        .map(|a| (0..6).map(|t| [t as f32, a as f32 * 0.5]).collect())
        .collect();
    let forecasts: Vec<Vec<Vec<[f32; 2]>>> = truth
        .iter()
        .enumerate()
        .map(|(a, path)| {
            (0..3)
                .map(|mode| {
                    let offset = shift * (1 + mode + a) as f32;
                    path.iter()
                        .map(|&[x, y]| [x + offset, y - offset])
                        .collect()
                })
                .collect()
        })
        .collect();
    Case::from_points(&forecasts, &truth)
}

#[test]
fn one_read_back_per_pass_gives_the_per_batch_values_bit_for_bit() {
    let config = MetricsConfig::argoverse2();
    let batches: Vec<Case> = (0..7).map(|i| batch(0.1 + 0.37 * i as f32)).collect();

    let mut plain = TrajectoryMetrics::new(config.clone()).unwrap();
    for case in &batches {
        plain.update(&case.tensor_batch().unwrap()).unwrap();
    }
    let expected =
        Metric::<kiln_ml_metrics::TensorTrajectoryBatch<burn::backend::Flex>>::compute(&plain);

    for max_in_flight in [1, 3, 100] {
        let mut device = DeviceTrajectoryMetrics::new(config.clone())
            .unwrap()
            .with_max_in_flight(max_in_flight);
        for case in &batches {
            device.update(&case.tensor_batch().unwrap()).unwrap();
            assert!(
                device.in_flight() < max_in_flight,
                "a read-back is forced at the bound"
            );
        }
        // `compute` includes what is in flight without reading it in.
        assert_eq!(device.compute(), expected, "max_in_flight {max_in_flight}");
        device.flush().unwrap();
        assert_eq!(device.in_flight(), 0);
        assert_eq!(device.compute(), expected, "max_in_flight {max_in_flight}");
    }
}

#[test]
fn an_invalid_batch_is_named_with_its_index_at_the_read_back() {
    let config = MetricsConfig::argoverse2();
    let clean = batch(0.2);
    let mut broken = batch(0.3);
    // Agent 1, mode 2, step 4, x.
    broken.predictions[((3 + 2) * 6 + 4) * 2] = f32::NAN;

    let mut device = DeviceTrajectoryMetrics::new(config.clone()).unwrap();
    let mut twice_clean = DeviceTrajectoryMetrics::new(config.clone()).unwrap();
    for _ in 0..2 {
        twice_clean.update(&clean.tensor_batch().unwrap()).unwrap();
    }
    twice_clean.flush().unwrap();
    device.update(&clean.tensor_batch().unwrap()).unwrap();
    device.flush().unwrap();
    device.update(&clean.tensor_batch().unwrap()).unwrap();
    // Queued without complaint: the values are on the device.
    device.update(&broken.tensor_batch().unwrap()).unwrap();
    let error = device.flush().unwrap_err();
    let Error::InBatch { batch, source } = &error else {
        panic!("not named with its batch: {error}");
    };
    assert_eq!(*batch, 2, "the third batch since the reset");
    assert_eq!(
        source.to_string(),
        "non-finite value NaN in `predictions` at agent 1 (mode 2, step 4, x)"
    );
    assert!(
        error.to_string().starts_with("batch 2 of the pass"),
        "{error}"
    );
    // The valid batch of that read-back was added, the invalid one not.
    assert_eq!(device.compute(), twice_clean.compute());
}

/// A batch refused when it is queued (its shape) still counts as a batch of the pass: a later
/// invalid batch is named by the index the caller counts.
#[test]
fn a_batch_refused_when_queued_keeps_the_later_indices() {
    let mut config = MetricsConfig::argoverse2();
    // Predictions of 5 agents each: a batch of 10 agents is two, one of 5 is one.
    config.agents_per_prediction = 5;
    let five = batch(0.2);
    let mut broken = batch(0.3);
    broken.predictions[((3 + 2) * 6 + 4) * 2] = f32::NAN;
    let four_agents = Case::from_points(
        &(0..4)
            .map(|_| vec![(0..6).map(|t| [t as f32, 0.0]).collect::<Vec<_>>()])
            .collect::<Vec<_>>(),
        &(0..4)
            .map(|_| (0..6).map(|t| [t as f32, 0.0]).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
    );
    let mut device = DeviceTrajectoryMetrics::new(config).unwrap();
    device.update(&five.tensor_batch().unwrap()).unwrap();
    let refused = device.update(&four_agents.tensor_batch().unwrap());
    assert!(
        matches!(refused, Err(Error::AgentsNotGroupable { .. })),
        "{refused:?}"
    );
    device.update(&broken.tensor_batch().unwrap()).unwrap();
    let Error::InBatch { batch, .. } = device.flush().unwrap_err() else {
        panic!("not named with its batch");
    };
    assert_eq!(batch, 2, "the third batch the caller passed");
}
