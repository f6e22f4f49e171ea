//! Properties: the host and tensor paths agree, merged states equal one pass, threads change
//! nothing, and rejected batches leave the state untouched.

use crate::common;

use common::{Case, PATH_TOLERANCE, assert_reports_close};
use kiln_ml_core::Metric;
use kiln_ml_metrics::{
    BatchShape, Error, FinalStep, Horizon, MetricsConfig, MissRule, ModeSelection, Parallelism,
    ProbabilityCheck, Pruning, SpeedScaling, TieOrder, TrajectoryMetrics,
};
use proptest::prelude::*;

/// A random configuration that fits trajectories of `steps` steps.
fn config_strategy(steps: usize) -> impl Strategy<Value = MetricsConfig> {
    (
        any::<bool>(),
        0..3usize,
        0..3usize,
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(1..7usize, 1..4),
        proptest::collection::vec(0..steps, 1..4),
        1..3usize,
    )
        .prop_map(
            move |(
                independent,
                pruning,
                miss,
                at_horizon,
                renormalize,
                top_k,
                last_steps,
                joint,
            )| {
                let mut config = MetricsConfig::argoverse2();
                config.name = "random".into();
                config.selection = if independent {
                    ModeSelection::Independent
                } else {
                    ModeSelection::MinFde
                };
                config.pruning = match pruning {
                    0 => Pruning::FirstK,
                    1 => Pruning::ByProbability {
                        ties: TieOrder::LowerIndexFirst,
                    },
                    _ => Pruning::ByProbability {
                        ties: TieOrder::HigherIndexFirst,
                    },
                };
                config.miss = match miss {
                    0 => MissRule::FinalDistance { threshold_m: 1.0 },
                    1 => MissRule::MaxDistance {
                        threshold_m: 1.5,
                        inclusive: true,
                    },
                    _ => MissRule::LateralLongitudinal {
                        speed_scaling: SpeedScaling::waymo(),
                    },
                };
                config.final_step = if at_horizon {
                    FinalStep::AtHorizon
                } else {
                    FinalStep::LastValid
                };
                config.probabilities.check = ProbabilityCheck::NonNegative;
                config.probabilities.renormalize = renormalize;
                config.top_k = top_k;
                config.horizons = last_steps
                    .into_iter()
                    .map(|s| Horizon::at_step(s).with_miss_box(0.8, 1.6))
                    .collect();
                config.agents_per_prediction = joint;
                config
            },
        )
}

/// A random case for `config`: `units` predictions of K modes over `steps` steps.
fn case_strategy(
    config: MetricsConfig,
    steps: usize,
) -> impl Strategy<Value = (MetricsConfig, Case)> {
    let joint = config.agents_per_prediction;
    (1..6usize, 1..5usize, any::<bool>(), any::<bool>()).prop_flat_map(
        move |(units, modes, masked, with_p)| {
            let agents = units * joint;
            let config = config.clone();
            (
                proptest::collection::vec(-3.0f32..3.0, agents * modes * steps * 2),
                proptest::collection::vec(-3.0f32..3.0, agents * steps * 2),
                // Few distinct probabilities, so ties are common and the tie order matters.
                proptest::collection::vec(
                    prop_oneof![Just(0.1f32), Just(0.25), Just(0.5), 0.0f32..1.0],
                    units * modes,
                ),
                proptest::collection::vec(prop::bool::weighted(0.8), agents * steps),
                proptest::collection::vec(-12.0f32..12.0, agents * 2),
                proptest::collection::vec(-3.2f32..3.2, agents * steps),
            )
                .prop_map(
                    move |(predictions, ground_truth, p, valid, velocity, heading)| {
                        // Predictions near the truth, so hits and misses both occur.
                        let predictions = predictions
                            .iter()
                            .enumerate()
                            .map(|(i, offset)| {
                                let agent = i / (modes * steps * 2);
                                let within = i % (steps * 2);
                                ground_truth[agent * steps * 2 + within] + offset * 0.6
                            })
                            .collect();
                        let positive = p.iter().any(|&v| v > 0.0);
                        let case = Case {
                            shape: BatchShape::new(agents, modes, steps),
                            predictions,
                            ground_truth,
                            probabilities: (with_p && positive)
                                .then(|| p.iter().map(|v| v + 0.01).collect()),
                            valid: masked.then_some(valid),
                            velocity: Some(velocity),
                            heading: Some(heading),
                        };
                        (config.clone(), case)
                    },
                )
        },
    )
}

fn config_and_case() -> impl Strategy<Value = (MetricsConfig, Case)> {
    (1..8usize).prop_flat_map(|steps| {
        config_strategy(steps).prop_flat_map(move |config| case_strategy(config, steps))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn host_and_tensor_paths_agree((config, case) in config_and_case()) {
        let host = case.host(&config).unwrap();
        let tensor = case.tensor(&config).unwrap();
        assert_reports_close(&host, &tensor, PATH_TOLERANCE);
    }

    #[test]
    fn merged_parts_equal_one_pass((config, case) in config_and_case(), split in 0.0f64..1.0) {
        let joint = config.agents_per_prediction;
        let units = case.shape.agents / joint;
        let cut = ((units as f64 * split) as usize).min(units);
        let whole = case.host(&config).unwrap();
        let mut merged = TrajectoryMetrics::new(config.clone()).unwrap();
        for (start, end) in [(0, cut), (cut, units)] {
            if start == end {
                continue;
            }
            let part = slice_units(&case, joint, start, end);
            let mut metrics = TrajectoryMetrics::new(config.clone()).unwrap();
            // One part on the host, the other on the device: their states merge all the same.
            if start == 0 {
                metrics.update(&part.host_batch().unwrap()).unwrap();
            } else {
                metrics.update(&part.tensor_batch().unwrap()).unwrap();
            }
            merged.merge(&metrics);
        }
        assert_reports_close(&whole, &merged.compute(), PATH_TOLERANCE);
    }

    #[test]
    fn threads_change_nothing((config, case) in config_and_case(), per_task in 1..4usize) {
        // Tasks run in parallel only for at least two tasks' worth of predictions; fewer would
        // compare the sequential path with itself.
        let units = case.shape.agents / config.agents_per_prediction;
        prop_assume!(units >= 2);
        let per_task = per_task.min(units / 2);
        let sequential = case.host(&config).unwrap();
        let mut parallel = TrajectoryMetrics::new(config).unwrap()
            .with_parallelism(Parallelism::Rayon { min_units_per_task: per_task });
        parallel.update(&case.host_batch().unwrap()).unwrap();
        assert_reports_close(&sequential, &parallel.compute(), 1e-12);
    }

    #[test]
    fn independent_min_ade_never_exceeds_min_fde_mode_min_ade((config, case) in config_and_case()) {
        let mut min_fde_mode = config;
        min_fde_mode.selection = ModeSelection::MinFde;
        // With the last valid step as the final one, both selections measure the same agents.
        min_fde_mode.final_step = FinalStep::LastValid;
        let mut independent = min_fde_mode.clone();
        independent.selection = ModeSelection::Independent;
        let a = case.host(&min_fde_mode).unwrap();
        let b = case.host(&independent).unwrap();
        for (ha, hb) in a.horizons.iter().zip(&b.horizons) {
            for (ka, kb) in ha.top_k.iter().zip(&hb.top_k) {
                if let (Some(x), Some(y)) = (ka.min_ade, kb.min_ade) {
                    prop_assert!(y <= x + 1e-9, "independent {y} > min-FDE mode {x}");
                }
                prop_assert_eq!(ka.min_fde, kb.min_fde);
            }
        }
    }

    #[test]
    fn actor_misses_lie_between_one_and_all_agents_of_each_missed_prediction(
        (config, case) in config_and_case()
    ) {
        // Under min-FDE selection a joint prediction misses when at least one agent of the
        // selected hypothesis does: miss_rate / agents <= actor_miss_rate <= miss_rate. (Not
        // under the max distance, whose miss is every kept mode's whatever the selection.)
        let mut config = config;
        config.selection = ModeSelection::MinFde;
        if let MissRule::MaxDistance { threshold_m, .. } = config.miss {
            config.miss = MissRule::FinalDistance { threshold_m };
        }
        let agents = config.agents_per_prediction as f64;
        let report = case.host(&config).unwrap();
        for horizon in &report.horizons {
            for entry in &horizon.top_k {
                match (entry.miss_rate, entry.actor_miss_rate) {
                    (Some(scene), Some(actor)) => {
                        prop_assert!(agents > 1.0);
                        prop_assert!(actor <= scene + 1e-12, "{actor} > {scene}");
                        prop_assert!(actor + 1e-12 >= scene / agents, "{actor} < {scene} / {agents}");
                    }
                    (_, actor) => prop_assert!(actor.is_none() || agents > 1.0),
                }
            }
        }
    }
}

/// The GPU-style tier: the tensor path on Burn's wgpu backend (a Vulkan adapter, lavapipe in
/// CI) agrees with the host path. Fewer cases: every new shape compiles kernels.
#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        #[test]
        fn host_and_wgpu_tensor_paths_agree((config, case) in config_and_case()) {
            let Some(device) = kiln_ml_testkit::wgpu_device() else { return Ok(()) };
            let host = case.host(&config).unwrap();
            let tensor = case.tensor_on::<burn::backend::Wgpu>(&config, &device).unwrap();
            assert_reports_close(&host, &tensor, PATH_TOLERANCE);
        }
    }
}

/// The predictions `start..end` of a case.
fn slice_units(case: &Case, joint: usize, start: usize, end: usize) -> Case {
    let BatchShape { modes, steps, .. } = case.shape;
    let (a, b) = (start * joint, end * joint);
    let cut = |values: &[f32], per_agent: usize| values[a * per_agent..b * per_agent].to_vec();
    Case {
        shape: BatchShape::new(b - a, modes, steps),
        predictions: cut(&case.predictions, modes * steps * 2),
        ground_truth: cut(&case.ground_truth, steps * 2),
        probabilities: case
            .probabilities
            .as_ref()
            .map(|p| p[start * modes..end * modes].to_vec()),
        valid: case
            .valid
            .as_ref()
            .map(|v| v[a * steps..b * steps].to_vec()),
        velocity: case.velocity.as_ref().map(|v| cut(v, 2)),
        heading: case.heading.as_ref().map(|h| cut(h, steps)),
    }
}

fn three_agents() -> Case {
    let truth: Vec<Vec<[f32; 2]>> = (0..3)
        .map(|a| (0..4).map(|t| [t as f32, a as f32]).collect())
        .collect();
    let forecasts: Vec<Vec<Vec<[f32; 2]>>> =
        truth.iter().map(|t| vec![t.clone(), t.clone()]).collect();
    Case::from_points(&forecasts, &truth)
}

#[test]
fn non_finite_values_are_named_on_both_paths_and_leave_the_state_unchanged() {
    let config = MetricsConfig::argoverse2();
    let clean = three_agents();
    let mut broken = clean.clone();
    // Agent 2, mode 1, step 3, y.
    broken.predictions[((2 * 2 + 1) * 4 + 3) * 2 + 1] = f32::NAN;
    let expected = "non-finite value NaN in `predictions` at agent 2 (mode 1, step 3, y)";
    assert_eq!(broken.host_batch().unwrap_err().to_string(), expected);

    let mut metrics = TrajectoryMetrics::new(config.clone()).unwrap();
    metrics.update(&clean.tensor_batch().unwrap()).unwrap();
    let before = metrics.compute();
    let error = metrics.update(&broken.tensor_batch().unwrap()).unwrap_err();
    assert_eq!(error.to_string(), expected);
    assert_eq!(metrics.compute(), before);

    let mut broken_truth = clean.clone();
    broken_truth.ground_truth[7] = f32::INFINITY;
    let error = broken_truth.tensor(&config).unwrap_err();
    assert_eq!(
        error,
        Error::NonFinite {
            field: "ground_truth",
            agent: 0,
            position: "step 3, y".into(),
            value: f32::INFINITY
        }
    );
}

#[test]
fn a_sum_within_the_tolerance_in_f64_passes_on_both_paths() {
    // 0.5 + (0.5 + 167·2⁻²⁴) is 1 + 9.95e-6 in f64 (within 1e-5), but rounds to
    // 1 + 84·2⁻²³ = 1 + 1.0014e-5 in f32.
    let nudged = 0.5 + 167.0 * 2f32.powi(-24);
    let case = three_agents().with_probabilities(&[0.5, 0.5, 0.5, nudged, 0.5, 0.5]);
    let config = MetricsConfig::argoverse2();
    assert!(case.host(&config).is_ok());
    case.both(&config);
    // On the GPU-style backend (lavapipe in CI), which sums in f32 on the device too.
    #[cfg(feature = "wgpu")]
    if let Some(device) = kiln_ml_testkit::wgpu_device() {
        assert!(
            case.tensor_on::<burn::backend::Wgpu>(&config, &device)
                .is_ok()
        );
    }
}

#[test]
fn distance_thresholds_not_exact_in_f32_miss_alike_on_both_paths() {
    use kiln_ml_metrics::MissRule;
    // Distances equal to the f32 nearest the threshold: above 9.01 (a miss under `>`), below
    // 2.1 (a hit under `>=`).
    for (threshold_m, inclusive, distance, missed) in [
        (9.01, None, 9.01f32, 1.0),
        (2.1, Some(true), 2.1f32, 0.0),
        (2.1, Some(false), 2.1f32, 0.0),
        // Exclusive max distance above its threshold: only an f64 comparison says miss.
        (9.01, Some(false), 9.01f32, 1.0),
    ] {
        let case = Case::from_points(&[vec![vec![[distance, 0.0]]]], &[vec![[0.0, 0.0]]]);
        let mut config = MetricsConfig::argoverse2();
        config.top_k = vec![1];
        config.miss = match inclusive {
            None => MissRule::FinalDistance { threshold_m },
            Some(inclusive) => MissRule::MaxDistance {
                threshold_m,
                inclusive,
            },
        };
        let report = case.both(&config);
        assert_eq!(
            report.at(1).unwrap().miss_rate,
            Some(missed),
            "{threshold_m} {inclusive:?}"
        );
        #[cfg(feature = "wgpu")]
        if let Some(device) = kiln_ml_testkit::wgpu_device() {
            let on_wgpu = case
                .tensor_on::<burn::backend::Wgpu>(&config, &device)
                .unwrap();
            assert_eq!(
                on_wgpu.at(1).unwrap().miss_rate,
                Some(missed),
                "wgpu: {threshold_m} {inclusive:?}"
            );
        }
    }
}

#[test]
fn probability_policy_errors_are_named_on_both_paths() {
    let config = MetricsConfig::argoverse2();
    let case = three_agents().with_probabilities(&[0.5, 0.5, 0.5, 0.5, 0.7, 0.2]);
    for result in [case.host(&config), case.tensor(&config)] {
        match result {
            Err(Error::ProbabilitiesNotNormalized {
                prediction: 2, sum, ..
            }) => assert!((sum - 0.9).abs() < 1e-6),
            other => panic!("expected a normalization error for prediction 2, got {other:?}"),
        }
    }
    let negative = three_agents().with_probabilities(&[0.5, 0.5, 1.5, -0.5, 0.5, 0.5]);
    for result in [negative.host(&config), negative.tensor(&config)] {
        assert!(
            matches!(
                result,
                Err(Error::ProbabilityOutOfRange {
                    prediction: 1,
                    mode: 0,
                    ..
                })
            ),
            "{result:?}"
        );
    }
}

#[test]
fn shape_errors_name_the_field() {
    let case = three_agents();
    let short = &case.ground_truth[..case.ground_truth.len() - 2];
    let error =
        kiln_ml_metrics::TrajectoryBatch::new(case.shape, &case.predictions, short).unwrap_err();
    assert!(
        matches!(
            error,
            Error::ShapeMismatch {
                field: "ground_truth",
                ..
            }
        ),
        "{error}"
    );
    let no_modes =
        kiln_ml_metrics::TrajectoryBatch::new(BatchShape::new(3, 0, 4), &[], &case.ground_truth);
    assert_eq!(no_modes.unwrap_err(), Error::NoModes);
    let mut config = MetricsConfig::argoverse1();
    config.horizons = vec![Horizon::first_steps(30)];
    assert_eq!(
        case.host(&config).unwrap_err(),
        Error::HorizonOutOfRange {
            horizon: 0,
            last_step: 29,
            steps: 4
        }
    );
    assert!(matches!(
        case.tensor(&config),
        Err(Error::HorizonOutOfRange { .. })
    ));
}

#[test]
fn masked_agents_without_valid_steps_are_skipped_and_counted() {
    let mut case = three_agents();
    case.predictions[0] += 3.0; // agent 0, mode 0, step 0 off by 3 m in x
    case.valid = Some([[false; 4], [true; 4], [true, true, false, false]].concat());
    let report = case.both(&MetricsConfig::argoverse2());
    let horizon = &report.horizons[0];
    assert_eq!(
        (horizon.units, horizon.ade_units, horizon.fde_units),
        (3, 2, 2)
    );
    assert_eq!(horizon.top_k[1].min_fde, Some(0.0));
}

#[test]
fn reset_forgets_everything() {
    let case = three_agents();
    let mut metrics = TrajectoryMetrics::new(MetricsConfig::argoverse2()).unwrap();
    let empty = metrics.compute();
    metrics.update(&case.host_batch().unwrap()).unwrap();
    assert_ne!(metrics.compute(), empty);
    metrics.reset();
    assert_eq!(metrics.compute(), empty);
    let mut other = TrajectoryMetrics::new(MetricsConfig::nuscenes()).unwrap();
    assert!(matches!(
        other.try_merge(&metrics),
        Err(Error::ConfigMismatch { .. })
    ));
}

#[test]
fn huge_finite_values_are_not_mistaken_for_non_finite_ones() {
    // The device checks finiteness through row sums; 3e38 + 3e38 overflows to infinity there,
    // but the values themselves are finite and the batch is accepted on both paths.
    let mut case = three_agents();
    case.predictions[0] = 3e38;
    case.predictions[2] = 3e38;
    assert!(case.host(&MetricsConfig::argoverse2()).is_ok());
    assert!(case.tensor(&MetricsConfig::argoverse2()).is_ok());
}
