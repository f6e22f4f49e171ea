//! Waymo's overlap rate (`ComputeOverlapRate` in
//! `waymo-research/waymo-open-dataset:src/waymo_open_dataset/metrics/motion_metrics.cc`): the
//! most confident of the first K hypotheses, boxed with the agent's own length and width and the
//! heading of its neighbouring points, against every other valid object, at every step up to the
//! horizon. Waymo's tests have no overlap case; these scenes follow from the definition by hand.

use crate::common;

use common::{Case, assert_reports_close};
use kiln_ml_core::Metric;
use kiln_ml_metrics::{
    Error, Horizon, MetricReport, MetricsConfig, Parallelism, Pruning, SceneBoxes,
    TrajectoryMetrics, TrajectoryType,
};

/// Four steps along y = `y`, two meters apart.
fn line(y: f32) -> Vec<[f32; 2]> {
    (0..4).map(|t| [2.0 * t as f32, y]).collect()
}

fn config(agents_per_prediction: usize) -> MetricsConfig {
    let mut config = MetricsConfig::argoverse2();
    config.top_k = vec![1, 2];
    config.horizons = vec![Horizon::at_step(1), Horizon::at_step(3)];
    config.pruning = Pruning::FirstK;
    config.agents_per_prediction = agents_per_prediction;
    config
}

/// One scene: object 0 is the agent (2 x 1 m, along y = 0); object 1 parks at (4, 3) from
/// step 2 on; object 2 sits on the agent's path but is never valid.
fn scene() -> (Vec<f32>, Vec<bool>) {
    let mut boxes = Vec::new();
    let mut valid = Vec::new();
    for t in 0..4 {
        boxes.extend([2.0 * t as f32, 0.0, 2.0, 1.0, 0.0]);
        valid.push(true);
    }
    for t in 0..4 {
        boxes.extend([4.0, 3.0, 2.0, 1.0, 0.0]);
        valid.push(t >= 2);
    }
    for _ in 0..4 {
        boxes.extend([2.0, 0.0, 2.0, 1.0, 0.0]);
    }
    valid.extend([false; 4]);
    (boxes, valid)
}

fn overlap_rates(case: &Case, config: &MetricsConfig, agent_object: &[usize]) -> Vec<Vec<f64>> {
    let (boxes, valid) = scene();
    let scenes = vec![0; agent_object.len()];
    let report = case
        .host_with(config, |batch| {
            batch.with_boxes(SceneBoxes::new(
                3,
                4,
                &boxes,
                &valid,
                &scenes,
                agent_object,
            )?)
        })
        .unwrap();
    report
        .horizons
        .iter()
        .map(|h| h.top_k.iter().map(|k| k.overlap_rate.unwrap()).collect())
        .collect()
}

#[test]
fn the_most_confident_kept_hypothesis_is_tested_up_to_the_horizon() {
    // Mode 0 (p 0.3) follows the ground truth; mode 1 (p 0.7) drives through object 1 at y = 3,
    // which appears at step 2.
    let case = Case::from_points(&[vec![line(0.0), line(3.0)]], &[line(0.0)])
        .with_probabilities(&[0.3, 0.7]);
    // Rows: horizons (step 1, step 3); columns: K = 1 (mode 0 only), K = 2 (mode 1 wins).
    assert_eq!(
        overlap_rates(&case, &config(1), &[0]),
        [[0.0, 0.0], [0.0, 1.0]]
    );
    // The agent's own box and the invalid object 2, both on mode 0's path, are never tested.
    let case = case.with_probabilities(&[0.7, 0.3]);
    assert_eq!(
        overlap_rates(&case, &config(1), &[0]),
        [[0.0, 0.0], [0.0, 0.0]]
    );
}

#[test]
fn boxes_that_only_touch_do_not_overlap() {
    // Along y = 2 the 1 m wide box reaches y = 2.5, where object 1 begins.
    let touching = Case::from_points(&[vec![line(2.0)]], &[line(0.0)]).with_probabilities(&[1.0]);
    assert_eq!(overlap_rates(&touching, &config(1), &[0])[1], [0.0, 0.0]);
    let grazing = Case::from_points(&[vec![line(2.01)]], &[line(0.0)]).with_probabilities(&[1.0]);
    assert_eq!(overlap_rates(&grazing, &config(1), &[0])[1], [1.0, 1.0]);
}

#[test]
fn a_joint_prediction_overlaps_when_any_agent_does() {
    // Agent 0 is object 0; agent 1 is object 1, predicted exactly. Agent 0's hypothesis runs
    // into object 1's ground-truth box at step 2; without probabilities the first mode counts.
    let truth_1: Vec<[f32; 2]> = vec![[4.0, 3.0]; 4];
    let case = Case::from_points(
        &[vec![line(3.0)], vec![truth_1.clone()]],
        &[line(0.0), truth_1],
    );
    assert_eq!(
        overlap_rates(&case, &config(2), &[0, 1]),
        [[0.0, 0.0], [1.0, 1.0]]
    );
}

#[test]
fn a_padding_agent_adds_no_overlap() {
    // Agent 0 follows the ground truth; agent 1 pads the batch (an all-false validity row), and
    // its junk forecast runs into object 1. Only agent 0 is a prediction the rate counts.
    let truth_1: Vec<[f32; 2]> = vec![[0.0, 0.0]; 4];
    let mut case = Case::from_points(&[vec![line(0.0)], vec![line(3.0)]], &[line(0.0), truth_1])
        .with_probabilities(&[1.0, 1.0]);
    case.valid = Some([[true; 4], [false; 4]].concat());
    assert_eq!(
        overlap_rates(&case, &config(1), &[0, 0]),
        [[0.0, 0.0], [0.0, 0.0]]
    );
}

#[test]
fn a_joint_prediction_with_an_agent_never_valid_still_counts() {
    // As `a_joint_prediction_overlaps_when_any_agent_does`, but object 1's ground truth is
    // valid at no step of the batch (it left the sensors' range). Waymo counts every
    // prediction of objects valid at the current time: this one overlaps. Only a prediction
    // none of whose agents is valid anywhere is padding.
    let truth_1: Vec<[f32; 2]> = vec![[4.0, 3.0]; 4];
    let mut case = Case::from_points(
        &[vec![line(3.0)], vec![truth_1.clone()]],
        &[line(0.0), truth_1],
    );
    case.valid = Some([[true; 4], [false; 4]].concat());
    assert_eq!(
        overlap_rates(&case, &config(2), &[0, 1]),
        [[0.0, 0.0], [1.0, 1.0]]
    );
    // Agent 0 valid at step 3 alone: no FDE at step 1, but the prediction counts there too.
    case.valid = Some([[false, false, false, true], [false; 4]].concat());
    assert_eq!(
        overlap_rates(&case, &config(2), &[0, 1]),
        [[0.0, 0.0], [1.0, 1.0]]
    );
}

#[test]
fn bad_boxes_are_named() {
    let (mut boxes, valid) = scene();
    assert!(matches!(
        SceneBoxes::new(3, 4, &boxes, &valid, &[0], &[3]),
        Err(Error::IndexOutOfRange {
            field: "agent_object",
            agent: 0,
            value: 3,
            limit: 3
        })
    ));
    assert!(matches!(
        SceneBoxes::new(3, 4, &boxes, &valid, &[1], &[0]),
        Err(Error::IndexOutOfRange {
            field: "agent_scene",
            ..
        })
    ));
    assert!(matches!(
        SceneBoxes::new(3, 4, &boxes[5..], &valid, &[0], &[0]),
        Err(Error::ShapeMismatch { field: "boxes", .. })
    ));
    // A NaN where the object is invalid is padding; where it is valid, an error that says where.
    boxes[2 * 20] = f32::NAN;
    assert!(SceneBoxes::new(3, 4, &boxes, &valid, &[0], &[0]).is_ok());
    boxes[20 + 3 * 5 + 3] = f32::NAN;
    let error = SceneBoxes::new(3, 4, &boxes, &valid, &[0], &[0]).unwrap_err();
    assert!(matches!(
        error,
        Error::InvalidBox {
            scene: 0,
            object: 1,
            step: 3,
            ..
        }
    ));
    assert!(
        error.to_string().contains("object 1 in scene 0 at step 3"),
        "{error}"
    );
    // Boxes for another number of steps than the batch's.
    let (boxes, valid) = scene();
    let three_steps = SceneBoxes::new(4, 3, &boxes, &valid, &[0], &[0]).unwrap();
    let case = Case::from_points(&[vec![line(0.0)]], &[line(0.0)]);
    assert!(matches!(
        case.host_batch().unwrap().with_boxes(three_steps),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn threads_and_merged_states_give_what_one_pass_gives() {
    // 64 copies of a two-mode scene, some overlapping, all with trajectory types.
    let mut forecasts = Vec::new();
    let mut truth = Vec::new();
    let mut probabilities = Vec::new();
    for i in 0..64 {
        let y = (i % 5) as f32;
        forecasts.push(vec![line(y), line(3.0 - y)]);
        truth.push(line(0.0));
        probabilities.extend([0.25 + (i % 3) as f32 * 0.25, 0.75 - (i % 3) as f32 * 0.25]);
    }
    let case = Case::from_points(&forecasts, &truth).with_probabilities(&probabilities);
    let types: Vec<Option<TrajectoryType>> = (0..64)
        .map(|i| {
            [
                None,
                Some(TrajectoryType::Straight),
                Some(TrajectoryType::LeftTurn),
            ][i % 3]
        })
        .collect();
    let (boxes, valid) = scene();
    let scenes = vec![0; 64];
    let objects = vec![0; 64];
    let scene_boxes = SceneBoxes::new(3, 4, &boxes, &valid, &scenes, &objects).unwrap();
    let batch = case
        .host_batch()
        .unwrap()
        .with_trajectory_types(&types)
        .unwrap()
        .with_boxes(scene_boxes)
        .unwrap();
    let run = |parallelism| {
        let mut metrics = TrajectoryMetrics::new(config(1))
            .unwrap()
            .with_parallelism(parallelism);
        metrics.update(&batch).unwrap();
        metrics.compute()
    };
    let one_pass = run(Parallelism::Sequential);
    let threaded = run(Parallelism::Rayon {
        min_units_per_task: 7,
    });
    assert_same(&one_pass, &threaded);
    let entry = one_pass.horizons[1].at(2).unwrap();
    assert!(entry.mean_average_precision.is_some() && entry.overlap_rate.is_some());
    assert!(entry.overlap_rate.unwrap() > 0.0 && entry.overlap_rate.unwrap() < 1.0);

    // Two halves merged, in either order.
    let half = |start: usize| {
        let mut metrics = TrajectoryMetrics::new(config(1)).unwrap();
        let part = Case::from_points(&forecasts[start..start + 32], &truth[start..start + 32])
            .with_probabilities(&probabilities[start * 2..(start + 32) * 2]);
        let part_boxes =
            SceneBoxes::new(3, 4, &boxes, &valid, &scenes[..32], &objects[..32]).unwrap();
        let batch = part
            .host_batch()
            .unwrap()
            .with_trajectory_types(&types[start..start + 32])
            .unwrap()
            .with_boxes(part_boxes)
            .unwrap();
        metrics.update(&batch).unwrap();
        metrics
    };
    let mut merged = half(32);
    merged.merge(&half(0));
    assert_same(&merged.compute(), &one_pass);
}

/// mAP, soft mAP and overlap exactly (sample order does not change them), the sums within
/// their summation-order rounding.
fn assert_same(left: &MetricReport, right: &MetricReport) {
    assert_reports_close(left, right, 1e-12);
    for (a, b) in left.horizons.iter().zip(&right.horizons) {
        for (x, y) in a.top_k.iter().zip(&b.top_k) {
            assert_eq!(x.mean_average_precision, y.mean_average_precision);
            assert_eq!(x.soft_mean_average_precision, y.soft_mean_average_precision);
            assert_eq!(x.overlap_rate, y.overlap_rate);
        }
    }
}
