//! Miss decisions at the threshold's edge, on the host path, as the references decide them:
//! Argoverse, nuScenes and av2 compute distances in float64 (numpy) from the submitted values.
//! An f32 distance can round onto the threshold from either side; the host recomputes the
//! deciding distance in f64 (the FDE always, the max distance when f32 cannot tell).

use crate::common;

use common::Case;
use kiln_ml_metrics::{MetricsConfig, MissRule};

/// One agent, one mode, `steps` steps at the origin but the last, at `last`.
fn case_ending_at(last: [f32; 2], steps: usize) -> Case {
    let mut forecast = vec![[0.0f32, 0.0]; steps];
    forecast[steps - 1] = last;
    Case::from_points(&[vec![forecast]], &[vec![[0.0, 0.0]; steps]])
}

#[test]
fn a_final_distance_just_above_the_threshold_misses_as_in_argoverse() {
    // |(1.2f, 1.6f)| is 2.0000000477 in f64 (Argoverse: 2.0000000477 > 2, a miss) and rounds
    // to exactly 2.0 in f32 (a hit by an f32 distance).
    let mut config = MetricsConfig::argoverse1();
    config.horizons = MetricsConfig::argoverse2().horizons;
    config.top_k = vec![1];
    let report = case_ending_at([1.2, 1.6], 3).host(&config).unwrap();
    let entry = report.at(1).unwrap();
    assert_eq!(entry.miss_rate, Some(1.0));
    assert!(entry.min_fde.unwrap() > 2.0, "{:?}", entry.min_fde);
}

#[test]
fn a_max_distance_just_below_the_threshold_is_a_hit_as_in_nuscenes() {
    // |(1.7117727f, 1.0343279f)| is 1.99999996 in f64 (nuScenes: not >= 2, a hit) and rounds
    // to exactly 2.0 in f32 (a miss by an f32 distance).
    let mut config = MetricsConfig::nuscenes();
    config.top_k = vec![1];
    assert!(matches!(
        config.miss,
        MissRule::MaxDistance {
            inclusive: true,
            ..
        }
    ));
    let report = case_ending_at([1.711_772_7, 1.034_327_9], 3)
        .with_probabilities(&[1.0])
        .host(&config)
        .unwrap();
    assert_eq!(report.at(1).unwrap().miss_rate, Some(0.0));
    // Just beyond it in f64 as well: a miss.
    let report = case_ending_at([1.711_772_7, 1.034_328], 3)
        .with_probabilities(&[1.0])
        .host(&config)
        .unwrap();
    assert_eq!(report.at(1).unwrap().miss_rate, Some(1.0));
}
