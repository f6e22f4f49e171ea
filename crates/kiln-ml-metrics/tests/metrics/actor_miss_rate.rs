//! The actor miss rate of joint predictions, as av2 defines it
//! (`argoverse/av2-api:src/av2/datasets/motion_forecasting/eval/metrics.py`,
//! `compute_world_fde` and `compute_world_misses`; reference/metrics.md section 3): per scene the
//! world with the lowest mean FDE (`np.argmin`, first on ties), then the share of its actors
//! whose FDE exceeds 2 m. av2 ships no tests for its world functions; these scenes are built so
//! that every value follows from the definitions by hand.

use crate::common;

use common::Case;
use kiln_ml_metrics::MetricsConfig;

/// A scene of actors parked at the origin for 3 steps; `final_offsets[actor][world]` is how far
/// (along x) each world's forecast ends.
fn scene(final_offsets: &[Vec<f32>]) -> Case {
    let forecasts: Vec<Vec<Vec<[f32; 2]>>> = final_offsets
        .iter()
        .map(|worlds| {
            worlds
                .iter()
                .map(|&end| vec![[0.0, 0.0], [end / 2.0, 0.0], [end, 0.0]])
                .collect()
        })
        .collect();
    let truth = vec![vec![[0.0f32, 0.0]; 3]; final_offsets.len()];
    Case::from_points(&forecasts, &truth)
}

fn joint_config(agents: usize) -> MetricsConfig {
    let mut config = MetricsConfig::argoverse2();
    config.agents_per_prediction = agents;
    config
}

fn concat(cases: &[Case]) -> Case {
    let mut all = cases[0].clone();
    for case in &cases[1..] {
        all.shape.agents += case.shape.agents;
        all.predictions.extend_from_slice(&case.predictions);
        all.ground_truth.extend_from_slice(&case.ground_truth);
    }
    all
}

#[test]
fn the_best_world_by_mean_fde_decides_which_actors_miss() {
    // World 0: FDEs 0.5, 3, 2.5 (mean 2), misses 2 of 3. World 1: 1, 1, 5 (mean 7/3).
    let first = scene(&[vec![0.5, 1.0], vec![3.0, 1.0], vec![2.5, 5.0]]);
    // A scene every actor of world 0 gets right.
    let second = scene(&[vec![0.0, 3.0], vec![0.0, 3.0], vec![0.0, 3.0]]);
    let report = concat(&[first.clone(), second]).both(&joint_config(3));
    let at_6 = report.at(6).unwrap();
    assert_eq!(at_6.min_fde, Some(1.0)); // (2 + 0) / 2
    // Scene level: the first scene misses (any actor), the second does not.
    assert_eq!(at_6.miss_rate, Some(0.5));
    // Actor level: 2 of 6 actors.
    assert_eq!(at_6.actor_miss_rate, Some(1.0 / 3.0));
    // K = 1 keeps world 0 (the first without probabilities) in both scenes: the same here.
    assert_eq!(report.at(1).unwrap().actor_miss_rate, Some(1.0 / 3.0));
    assert_eq!(
        first.both(&joint_config(3)).at(6).unwrap().actor_miss_rate,
        Some(2.0 / 3.0)
    );
}

#[test]
fn a_lower_actor_miss_count_does_not_pick_the_world() {
    // World 0: FDEs 2.5, 1.0 (mean 1.75), one miss. World 1: 1.9, 1.9 (mean 1.9), none. av2
    // picks world 0 by mean FDE, so one actor of two misses.
    let case = scene(&[vec![2.5, 1.9], vec![1.0, 1.9]]);
    let at_6 = *case.both(&joint_config(2)).at(6).unwrap();
    assert_eq!(at_6.actor_miss_rate, Some(0.5));
    assert_eq!(at_6.miss_rate, Some(1.0));
}

#[test]
fn equal_mean_fdes_select_the_first_world() {
    // World 0: 1 and 3 (one miss); world 1: 2 and 2 (none); both average 2 m.
    let case = scene(&[vec![1.0, 2.0], vec![3.0, 2.0]]);
    let at_6 = *case.both(&joint_config(2)).at(6).unwrap();
    assert_eq!(at_6.actor_miss_rate, Some(0.5));
    // With probabilities the most probable world ranks first and wins the tie: av2's argmin over
    // a submission as `from_parquet` reads it (worlds in descending probability).
    let ranked = case.with_probabilities(&[0.4, 0.6]);
    let at_6 = *ranked.both(&joint_config(2)).at(6).unwrap();
    assert_eq!(at_6.actor_miss_rate, Some(0.0));
}

#[test]
fn single_agent_predictions_have_no_actor_miss_rate() {
    let case = scene(&[vec![3.0, 1.0]]);
    let report = case.both(&MetricsConfig::argoverse2());
    assert_eq!(report.at(6).unwrap().actor_miss_rate, None);
    assert_eq!(report.at(6).unwrap().miss_rate, Some(0.0));
}

#[test]
fn a_scene_with_an_actor_lacking_a_final_step_is_not_counted() {
    let mut case = concat(&[
        scene(&[vec![3.0], vec![0.0]]),
        scene(&[vec![3.0], vec![0.0]]),
    ]);
    // The second scene's first actor has no valid step at all.
    let mut valid = vec![true; 12];
    valid[6..9].fill(false);
    case.valid = Some(valid);
    let report = case.both(&joint_config(2));
    assert_eq!(report.at(6).unwrap().actor_miss_rate, Some(0.5));
    assert_eq!(report.horizons[0].fde_units, 1);
}
