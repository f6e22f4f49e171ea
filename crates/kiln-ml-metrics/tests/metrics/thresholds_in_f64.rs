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

/// The ADE over 60 steps, against the mean of the f64 distances of the same f32 values, on 200
/// paths: within numpy's `assert_allclose` default (relative 1e-7), as av2 checks its metrics.
/// Summed in f32 the host drifted past that on some of them.
#[test]
fn the_ade_is_within_a_float64_references_tolerance() {
    let steps = 60;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut worst = 0.0f64;
    for _ in 0..200 {
        let forecast: Vec<[f32; 2]> = (0..steps)
            .map(|_| [100.0 * uniform() - 50.0, 100.0 * uniform() - 50.0])
            .collect();
        let truth: Vec<[f32; 2]> = (0..steps).map(|_| [uniform(), uniform()]).collect();
        let reference = forecast
            .iter()
            .zip(&truth)
            .map(|(f, g)| {
                (f64::from(f[0]) - f64::from(g[0])).hypot(f64::from(f[1]) - f64::from(g[1]))
            })
            .sum::<f64>()
            / steps as f64;
        let mut config = MetricsConfig::argoverse2();
        config.top_k = vec![1];
        let report = Case::from_points(&[vec![forecast]], &[truth])
            .host(&config)
            .unwrap();
        let ade = report.at(1).unwrap().min_ade.unwrap();
        worst = worst.max((ade - reference).abs() / reference);
    }
    assert!(worst <= 1e-7, "worst relative error {worst:e}");
}
