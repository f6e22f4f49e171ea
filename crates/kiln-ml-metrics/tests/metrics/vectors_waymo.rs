//! Public test vectors of the Waymo Open Motion Dataset:
//! `waymo-research/waymo-open-dataset:src/waymo_open_dataset/metrics/motion_metrics_test.cc`
//! and `metrics/ops/motion_metrics_ops_test.py` (reference/metrics.md section 8.4).
//!
//! The tests' configuration: 4 predicted steps at 10 Hz, one measurement step (3) with lateral
//! 1.0 m / longitudinal 2.0 m, 6 predictions, speed scale 1.0 at both bounds. Two vehicles form
//! one joint prediction. Results are read for (VEHICLE, step 3). Every case with an mAP
//! expectation checks it too, with trajectory types classified from the test's own tracks.

use crate::common;

use common::{Case, assert_close};
use kiln_ml_metrics::{
    BatchShape, Error, Horizon, MetricsConfig, MissRule, SpeedScaling, TopKReport, TrackState,
    TrajectoryType,
};

type Track = [[f32; 2]; 4];

const OBJECT_1: Track = [[4.0, 4.0], [6.0, 6.0], [8.0, 8.0], [10.0, 10.0]];
const OBJECT_2: Track = [[-2.0, 0.0], [-3.0, 0.0], [-4.0, 0.0], [-5.0, 0.0]];
// The headings exactly as the C++ test writes them (close to, not equal to, pi/4 and pi).
#[allow(clippy::approx_constant, clippy::excessive_precision)]
const HEADING_1: f32 = 0.78539816;
#[allow(clippy::approx_constant)]
const HEADING_2: f32 = 3.14159;

fn config(speed_scaling: SpeedScaling) -> MetricsConfig {
    let mut config = MetricsConfig::waymo();
    config.horizons = vec![Horizon::at_step(3).with_miss_box(1.0, 2.0)];
    config.miss = MissRule::LateralLongitudinal { speed_scaling };
    config.agents_per_prediction = 2;
    config
}

/// One joint prediction of both objects: (confidence, object 1 track, object 2 track) per hypothesis.
fn joint(hypotheses: &[(f32, Track, Track)], truth: [Track; 2], velocities: [[f32; 2]; 2]) -> Case {
    let k = hypotheses.len();
    let mut predictions = Vec::new();
    for object in 0..2 {
        for (_, first, second) in hypotheses {
            let track = if object == 0 { first } else { second };
            predictions.extend(track.iter().flatten());
        }
    }
    Case {
        shape: BatchShape::new(2, k, 4),
        predictions,
        ground_truth: truth.iter().flatten().flatten().copied().collect(),
        probabilities: Some(hypotheses.iter().map(|h| h.0).collect()),
        valid: None,
        velocity: Some(velocities.iter().flatten().copied().collect()),
        heading: Some(
            [[HEADING_1; 4], [HEADING_2; 4]]
                .iter()
                .flatten()
                .copied()
                .collect(),
        ),
    }
}

fn standard(hypotheses: &[(f32, Track, Track)]) -> Case {
    joint(
        hypotheses,
        [OBJECT_1, OBJECT_2],
        [[20.0, 20.0], [-10.0, 0.0]],
    )
}

fn with_last(track: Track, last: [f32; 2]) -> Track {
    let mut track = track;
    track[3] = last;
    track
}

fn miss_rate(case: &Case, speed_scaling: SpeedScaling) -> f64 {
    case.both(&config(speed_scaling))
        .at(6)
        .unwrap()
        .miss_rate
        .unwrap()
}

fn unscaled(case: &Case) -> f64 {
    miss_rate(case, SpeedScaling::none())
}

#[test]
fn waymo_no_misses() {
    assert_eq!(unscaled(&standard(&[(0.5, OBJECT_1, OBJECT_2)])), 0.0);
}

#[test]
fn waymo_lateral_2_misses() {
    let shifted = OBJECT_2.map(|[x, _]| [x, 1.01]);
    assert_eq!(unscaled(&standard(&[(0.5, OBJECT_1, shifted)])), 1.0);
}

#[test]
fn waymo_lateral_1_misses() {
    let last = with_last(OBJECT_1, [9.292, 10.708]);
    assert_eq!(unscaled(&standard(&[(0.5, last, OBJECT_2)])), 1.0);
}

#[test]
fn waymo_no_miss_lateral_2() {
    let last = with_last(OBJECT_1, [9.294, 10.706]);
    assert_eq!(unscaled(&standard(&[(0.5, last, OBJECT_2)])), 0.0);
}

#[test]
fn waymo_longitudinal_2_misses() {
    let last = with_last(OBJECT_2, [-7.01, 0.0]);
    assert_eq!(unscaled(&standard(&[(0.5, OBJECT_1, last)])), 1.0);
}

#[test]
fn waymo_longitudinal_1_misses() {
    let last = with_last(OBJECT_1, [11.415, 11.415]);
    assert_eq!(unscaled(&standard(&[(0.5, last, OBJECT_2)])), 1.0);
}

#[test]
fn waymo_no_miss_longitudinal_1() {
    let last = with_last(OBJECT_1, [11.414, 11.414]);
    assert_eq!(unscaled(&standard(&[(0.5, last, OBJECT_2)])), 0.0);
}

#[test]
fn waymo_two_joint_predictions_no_miss() {
    let far = with_last(OBJECT_2, [-7.01, 0.0]);
    assert_eq!(
        unscaled(&standard(&[
            (0.8, OBJECT_1, far),
            (0.5, OBJECT_1, OBJECT_2)
        ])),
        0.0
    );
}

#[test]
fn waymo_two_joint_predictions_miss() {
    let far_2 = with_last(OBJECT_2, [-7.01, 0.0]);
    let far_1 = with_last(OBJECT_1, [14.0, 14.0]);
    assert_eq!(
        unscaled(&standard(&[(0.8, OBJECT_1, far_2), (0.5, far_1, OBJECT_2)])),
        1.0
    );
}

#[test]
fn waymo_compute_min_ade_joint_mean_over_agents() {
    let a1: Track = [[4.0, 0.0], [6.0, 0.0], [8.0, 0.0], [10.0, 0.0]];
    let a2: Track = [[0.0, 2.0], [0.0, 3.0], [0.0, 4.0], [0.0, 5.0]];
    let b1: Track = [[14.0, 0.0], [16.0, 0.0], [18.0, 0.0], [20.0, 0.0]];
    let b2: Track = [[0.0, 22.0], [0.0, 23.0], [0.0, 24.0], [0.0, 25.0]];
    let report = standard(&[(0.5, a1, a2), (0.5, b1, b2)]).both(&config(SpeedScaling::none()));
    let entry = report.at(6).unwrap();
    assert_close(entry.min_ade, 5.97487, 1e-4);
    assert_close(entry.min_fde, 8.53553, 1e-4);
}

/// The velocity-scaling tests: speed bounds 1.0 / 3.0 m/s, scales 0.5 / 1.0.
fn velocity_scaling() -> SpeedScaling {
    SpeedScaling {
        lower_speed_mps: 1.0,
        upper_speed_mps: 3.0,
        lower_scale: 0.5,
        upper_scale: 1.0,
    }
}

fn scaled_case(object_2: Track, speed: f32) -> Case {
    joint(
        &[(0.5, OBJECT_1, object_2)],
        [OBJECT_1, OBJECT_2],
        [[20.0, 20.0], [speed, 0.0]],
    )
}

#[test]
fn waymo_velocity_scaling_lateral() {
    let lateral = with_last(OBJECT_2, [-5.0, 0.75]);
    assert_eq!(
        miss_rate(&scaled_case(lateral, 10.0), velocity_scaling()),
        0.0
    );
    assert_eq!(
        miss_rate(&scaled_case(lateral, 0.0), velocity_scaling()),
        1.0
    );
    // Just below 2 m/s the scale is under 0.75 (C++ test: 1.9999; TF-op test: 1.999).
    assert_eq!(
        miss_rate(&scaled_case(lateral, 1.9999), velocity_scaling()),
        1.0
    );
    assert_eq!(
        miss_rate(&scaled_case(lateral, 1.999), velocity_scaling()),
        1.0
    );
    assert_eq!(
        miss_rate(&scaled_case(lateral, 2.001), velocity_scaling()),
        0.0
    );
}

#[test]
fn waymo_velocity_scaling_longitudinal() {
    let longitudinal = with_last(OBJECT_2, [-6.5, 0.0]);
    assert_eq!(
        miss_rate(&scaled_case(longitudinal, 10.0), velocity_scaling()),
        0.0
    );
    assert_eq!(
        miss_rate(&scaled_case(longitudinal, 0.0), velocity_scaling()),
        1.0
    );
    assert_eq!(
        miss_rate(&scaled_case(longitudinal, 1.9999), velocity_scaling()),
        1.0
    );
    assert_eq!(
        miss_rate(&scaled_case(longitudinal, 1.999), velocity_scaling()),
        1.0
    );
    assert_eq!(
        miss_rate(&scaled_case(longitudinal, 2.001), velocity_scaling()),
        0.0
    );
}

#[test]
fn waymo_invalid_joint_prediction_is_an_error() {
    // InvalidJointPredictions / MissingObjectPredictions: kiln has no object ids; the analog is
    // a batch whose agents do not form whole joint predictions, or a missing probability row.
    let mut case = standard(&[(0.5, OBJECT_1, OBJECT_2)]);
    let config = config(SpeedScaling::none());
    let mut single = config.clone();
    single.agents_per_prediction = 1;
    assert!(matches!(
        case.host(&single),
        Err(Error::ShapeMismatch {
            field: "probabilities",
            ..
        })
    ));
    assert!(matches!(
        case.tensor(&single),
        Err(Error::ShapeMismatch {
            field: "probabilities",
            ..
        })
    ));
    let mut triple = config;
    triple.agents_per_prediction = 3;
    assert!(matches!(
        case.host(&triple),
        Err(Error::AgentsNotGroupable {
            agents: 2,
            agents_per_prediction: 3
        })
    ));
    case.velocity = None;
    let mut needs_motion = triple;
    needs_motion.agents_per_prediction = 2;
    assert!(matches!(
        case.host(&needs_motion),
        Err(Error::MissingInput {
            field: "velocity",
            ..
        })
    ));
    assert!(matches!(
        case.tensor(&needs_motion),
        Err(Error::MissingInput {
            field: "velocity",
            ..
        })
    ));
}

#[test]
fn waymo_invalid_ground_truth_at_the_step_is_not_measured() {
    // GT invalid at step 3: no minFDE or miss measurement, but minADE over the valid steps.
    let mut case = standard(&[(0.5, OBJECT_1, with_last(OBJECT_2, [-9.0, 0.0]))]);
    case.valid = Some(vec![true, true, true, false, true, true, true, true]);
    let report = case.both(&config(SpeedScaling::none()));
    let horizon = &report.horizons[0];
    assert_eq!(
        (horizon.units, horizon.ade_units, horizon.fde_units),
        (1, 1, 0)
    );
    assert_eq!(horizon.top_k[0].miss_rate, None);
    assert_eq!(horizon.top_k[0].min_fde, None);
    // Object 1 (3 valid steps) is exact; object 2 is off by 4 m only at step 3: (0 + 1) / 2.
    assert_close(horizon.top_k[0].min_ade, 0.5, 1e-6);
}

/// The test scenario's full tracks (current state first), classified as Waymo's
/// `ClassifyTrack(track_history_samples = 0, track)` sees them: both are STRAIGHT.
fn scenario_types(parked_first: bool) -> Vec<Option<TrajectoryType>> {
    let state = |x: f32, y: f32, heading: f32, velocity: [f32; 2]| TrackState {
        x,
        y,
        heading,
        velocity_x: velocity[0],
        velocity_y: velocity[1],
    };
    // Velocities are set on the current state only, as in the C++ test.
    let first: Vec<TrackState> = (0..5)
        .map(|i| {
            let velocity = if i == 0 && !parked_first {
                [20.0, 20.0]
            } else {
                [0.0, 0.0]
            };
            let at = if parked_first {
                0.0
            } else {
                2.0 + 2.0 * i as f32
            };
            state(at, at, HEADING_1, velocity)
        })
        .collect();
    let second: Vec<TrackState> = (0..5)
        .map(|i| {
            let velocity = if i == 0 { [-10.0, 0.0] } else { [0.0, 0.0] };
            state(-1.0 - i as f32, 0.0, HEADING_2, velocity)
        })
        .collect();
    [first, second]
        .iter()
        .map(|track| TrajectoryType::of_track(track, &[true; 5], 0))
        .collect()
}

fn scored(
    case: &Case,
    types: &[Option<TrajectoryType>],
    speed_scaling: SpeedScaling,
) -> TopKReport {
    let report = case
        .host_with(&config(speed_scaling), |batch| {
            batch.with_trajectory_types(types)
        })
        .expect("host path");
    *report.at(6).unwrap()
}

/// (miss rate, mAP) as the C++ and TF-op tests read them.
fn miss_and_map(case: &Case) -> (f64, f64) {
    let report = scored(case, &scenario_types(false), SpeedScaling::none());
    (
        report.miss_rate.unwrap(),
        report.mean_average_precision.unwrap(),
    )
}

#[test]
fn waymo_scenario_tracks_are_straight() {
    assert_eq!(
        scenario_types(false),
        [
            Some(TrajectoryType::Straight),
            Some(TrajectoryType::Straight)
        ]
    );
    assert_eq!(
        scenario_types(true),
        [
            Some(TrajectoryType::Stationary),
            Some(TrajectoryType::Straight)
        ]
    );
}

#[test]
fn waymo_map_single_hypothesis_cases() {
    let far_1 = |last| with_last(OBJECT_1, last);
    let far_2 = |last| with_last(OBJECT_2, last);
    let cases: [(&str, Track, Track, (f64, f64)); 7] = [
        ("ComputeMissRateNoMisses", OBJECT_1, OBJECT_2, (0.0, 1.0)),
        (
            "ComputeMissRateLateral_2",
            OBJECT_1,
            OBJECT_2.map(|[x, _]| [x, 1.01]),
            (1.0, 0.0),
        ),
        (
            "ComputeMissRateLateral_1",
            far_1([9.292, 10.708]),
            OBJECT_2,
            (1.0, 0.0),
        ),
        (
            "ComputeNoMissLateral_2",
            far_1([9.294, 10.706]),
            OBJECT_2,
            (0.0, 1.0),
        ),
        (
            "ComputeMissRateLongitudinal_2",
            OBJECT_1,
            far_2([-7.01, 0.0]),
            (1.0, 0.0),
        ),
        (
            "ComputeMissRateLongitudinal_1",
            far_1([11.415, 11.415]),
            OBJECT_2,
            (1.0, 0.0),
        ),
        (
            "ComputeNoMissLongitudinal_1",
            far_1([11.414, 11.414]),
            OBJECT_2,
            (0.0, 1.0),
        ),
    ];
    for (name, first, second, expected) in cases {
        assert_eq!(
            miss_and_map(&standard(&[(0.5, first, second)])),
            expected,
            "{name}"
        );
    }
}

#[test]
fn waymo_map_two_joint_predictions() {
    let far_2 = with_last(OBJECT_2, [-7.01, 0.0]);
    let far_1 = with_last(OBJECT_1, [14.0, 14.0]);
    // TwoJointPredictionsNoMiss: the confident hypothesis misses, the other matches.
    let no_miss = standard(&[(0.8, OBJECT_1, far_2), (0.5, OBJECT_1, OBJECT_2)]);
    assert_eq!(miss_and_map(&no_miss), (0.0, 0.5));
    // TwoJointPredictionsMiss.
    let miss = standard(&[(0.8, OBJECT_1, far_2), (0.5, far_1, OBJECT_2)]);
    assert_eq!(miss_and_map(&miss), (1.0, 0.0));
    // TF-op testComputeNoMissLateral_2: both hypotheses match; the second is a false positive
    // for mAP (one true positive per object) and left out of soft mAP.
    let near = with_last(OBJECT_1, [9.294, 10.706]);
    let both = standard(&[(0.8, near, OBJECT_2), (0.5, OBJECT_1, OBJECT_2)]);
    assert_eq!(miss_and_map(&both), (0.0, 1.0));
    let soft = scored(&both, &scenario_types(false), SpeedScaling::none());
    assert_eq!(soft.soft_mean_average_precision, Some(1.0));
    assert_eq!(
        scored(&no_miss, &scenario_types(false), SpeedScaling::none()).soft_mean_average_precision,
        Some(0.5)
    );
}

/// The preset's 5 s box as Waymo's code compares it: the float threshold `1.8f`
/// (1.79999995...) against the displacement in double (float prediction minus track).
#[test]
fn waymo_preset_compares_at_its_float_thresholds_in_double() {
    let miss_at_5s = |forecast_y: f32, truth_y: f32| {
        let mut forecast = vec![[0.0f32, 0.0]; 16];
        let mut truth = vec![[0.0f32, 0.0]; 16];
        forecast[9][1] = forecast_y;
        truth[9][1] = truth_y;
        let mut case = Case::from_points(&[vec![forecast]], &[truth]);
        case.velocity = Some(vec![20.0, 0.0]); // above 11 m/s: scale 1
        case.heading = Some(vec![0.0; 16]); // lateral is y
        let report = case.host(&MetricsConfig::waymo()).expect("host path");
        report.horizons[1].top_k[0].miss_rate.unwrap()
    };
    // Exactly 1.8f is within the box, as in Waymo (and as with a threshold of 1.8).
    assert_eq!(miss_at_5s(1.8, 0.0), 0.0);
    // 1.79999997 m in double: beyond 1.8f, a miss in Waymo. An f32 difference rounded it to
    // 1.8f, and a threshold of 1.8 kept it in the box: kiln called it a hit before.
    assert_eq!(miss_at_5s(1.8f32.next_up(), 1.0e-7), 1.0);
}

/// Waymo neither checks nor normalizes confidences: negative ones (logits) rank as given, so
/// shifting every confidence by the same amount leaves the miss rate and mAP as they were.
#[test]
fn waymo_map_ranks_negative_confidences_as_given() {
    let far_2 = with_last(OBJECT_2, [-7.01, 0.0]);
    let far_1 = with_last(OBJECT_1, [14.0, 14.0]);
    for shift in [0.0, -1.0, -100.0] {
        let no_miss = standard(&[
            (0.8 + shift, OBJECT_1, far_2),
            (0.5 + shift, OBJECT_1, OBJECT_2),
        ]);
        assert_eq!(miss_and_map(&no_miss), (0.0, 0.5), "shift {shift}");
        let miss = standard(&[
            (0.8 + shift, OBJECT_1, far_2),
            (0.5 + shift, far_1, OBJECT_2),
        ]);
        assert_eq!(miss_and_map(&miss), (1.0, 0.0), "shift {shift}");
    }
    // The order, not the values, decides: the matching hypothesis ranked first gives mAP 1.
    let first = standard(&[(-0.5, OBJECT_1, far_2), (-0.2, OBJECT_1, OBJECT_2)]);
    assert_eq!(miss_and_map(&first), (0.0, 1.0));
}

#[test]
fn waymo_two_joint_predictions_object_and_trajectory_types() {
    // TwoJointPredictionsObjectAndTrajectoryTypes: object 1 parked, so the joint prediction is
    // bucketed by object 2 (STRAIGHT); the STATIONARY bucket stays empty. MR 0, mAP 0.5. kiln
    // has no object types: this is the PEDESTRIAN breakdown, fed as its own metric.
    let parked: Track = [[0.0, 0.0]; 4];
    let far = with_last(OBJECT_2, [-7.01, 0.0]);
    let case = joint(
        &[(0.8, parked, far), (0.5, parked, OBJECT_2)],
        [parked, OBJECT_2],
        [[0.0, 0.0], [-10.0, 0.0]],
    );
    let mut metrics = config(SpeedScaling::none()).init().unwrap();
    let types = scenario_types(true);
    kiln_ml_core::Metric::update(
        &mut metrics,
        &case
            .host_batch()
            .unwrap()
            .with_trajectory_types(&types)
            .unwrap(),
    )
    .unwrap();
    let precision = &metrics.sums().horizons[0].precision[0];
    assert_eq!(
        precision.buckets[TrajectoryType::Stationary as usize].predictions,
        0
    );
    assert_eq!(
        precision.buckets[TrajectoryType::Straight as usize].predictions,
        1
    );
    let report = metrics.compute();
    assert_eq!(report.at(6).unwrap().miss_rate, Some(0.0));
    assert_eq!(report.at(6).unwrap().mean_average_precision, Some(0.5));
}

#[test]
fn waymo_map_velocity_scaling() {
    // testComputeVelocityScalingLatitudinal / Longitudinal at the original speed: mAP 1.
    for last in [[-5.0, 0.75], [-6.5, 0.0]] {
        let case = scaled_case(with_last(OBJECT_2, last), 10.0);
        let report = scored(&case, &scenario_types(false), velocity_scaling());
        assert_eq!(report.mean_average_precision, Some(1.0), "{last:?}");
        let slow = scaled_case(with_last(OBJECT_2, last), 0.0);
        let report = scored(&slow, &scenario_types(false), velocity_scaling());
        assert_eq!(report.mean_average_precision, Some(0.0), "{last:?}");
    }
}

#[test]
fn waymo_map_needs_probabilities_and_skips_unjudgeable_predictions() {
    let mut case = standard(&[(0.5, OBJECT_1, OBJECT_2)]);
    case.probabilities = None;
    let types = scenario_types(false);
    assert!(matches!(
        case.host_with(&config(SpeedScaling::none()), |b| b
            .with_trajectory_types(&types)),
        Err(Error::MissingInput {
            field: "probabilities",
            ..
        })
    ));
    // Ground truth invalid at the measurement step: IsMatch has no answer, no samples.
    let mut invalid = standard(&[(0.5, OBJECT_1, OBJECT_2)]);
    invalid.valid = Some(vec![true, true, true, false, true, true, true, true]);
    let report = scored(&invalid, &types, SpeedScaling::none());
    assert_eq!(report.mean_average_precision, None);
    // No classifiable agent: left out too.
    let report = scored(
        &standard(&[(0.5, OBJECT_1, OBJECT_2)]),
        &[None, None],
        SpeedScaling::none(),
    );
    assert_eq!(report.mean_average_precision, None);
}

#[test]
fn waymo_map_no_misses_2_with_the_agents_swapped() {
    // TF-op testComputeMissRateNoMisses2: the two trajectories swapped together with
    // `prediction_ground_truth_indices` = [1, 0]. kiln has no indices: the analog is object 2
    // as the first agent of the joint prediction, with its ground truth, motion and type.
    let case = joint(
        &[(0.5, OBJECT_2, OBJECT_1)],
        [OBJECT_2, OBJECT_1],
        [[-10.0, 0.0], [20.0, 20.0]],
    );
    let mut case = case;
    case.heading = Some(
        [[HEADING_2; 4], [HEADING_1; 4]]
            .iter()
            .flatten()
            .copied()
            .collect(),
    );
    let mut types = scenario_types(false);
    types.reverse();
    let report = scored(&case, &types, SpeedScaling::none());
    assert_eq!(
        (report.miss_rate, report.mean_average_precision),
        (Some(0.0), Some(1.0))
    );
}
