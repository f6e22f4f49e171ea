//! Public test vectors of Argoverse 2:
//! `argoverse/av2-api:tests/unit/datasets/motion_forecasting/eval/test_metrics.py`
//! (reference/metrics.md section 8.1). The ground truth is 10 steps parked at the origin.
//! Values are checked as av2 checks them, `np.testing.assert_allclose` (relative 1e-7).

use crate::common;

use common::{Case, assert_allclose, assert_close};
use kiln_ml_metrics::per_mode::{brier_scores, mode_errors};
use kiln_ml_metrics::{Error, MetricsConfig, MissRule, ProbabilityCheck};

fn truth() -> Vec<[f32; 2]> {
    vec![[0.0, 0.0]; 10]
}

fn stationary() -> Vec<[f32; 2]> {
    vec![[1.0, 1.0]; 10]
}

fn straight() -> Vec<[f32; 2]> {
    (0..10).map(|t| [t as f32, 0.0]).collect()
}

fn diagonal() -> Vec<[f32; 2]> {
    (0..10).map(|t| [t as f32, t as f32]).collect()
}

fn case(forecast: Vec<[f32; 2]>, k: usize) -> Case {
    Case::from_points(&[vec![forecast; k]], &[truth()])
}

fn with_threshold(threshold_m: f64) -> MetricsConfig {
    let mut config = MetricsConfig::argoverse2();
    config.miss = MissRule::FinalDistance { threshold_m };
    config
}

fn flat(points: &[[f32; 2]], k: usize) -> Vec<f32> {
    (0..k)
        .flat_map(|_| points.iter().flatten().copied())
        .collect()
}

#[test]
fn av2_compute_ade_and_fde_per_mode() {
    let sqrt2 = std::f64::consts::SQRT_2;
    for (forecast, ade, fde) in [
        (stationary(), sqrt2, sqrt2),
        (straight(), 4.5, 9.0),
        (diagonal(), 6.3639610306789285, 12.727922061357857),
    ] {
        for k in [1, 6] {
            let errors = mode_errors(&flat(&forecast, k), &flat(&truth(), 1), k).unwrap();
            assert_eq!(errors.len(), k, "one value per mode, shape (K,)");
            for mode in errors {
                assert_close(Some(mode.ade_m), ade, 1e-12);
                assert_close(Some(mode.fde_m), fde, 1e-12);
            }
        }
    }
}

#[test]
fn av2_stationary_k1_and_k6_metrics() {
    for k in [1, 6] {
        let report = case(stationary(), k).both(&MetricsConfig::argoverse2());
        let entry = report.at(6).unwrap();
        assert_allclose(entry.min_ade, std::f64::consts::SQRT_2);
        assert_allclose(entry.min_fde, std::f64::consts::SQRT_2);
        // compute_is_missed_prediction, threshold 2.0: not missed.
        assert_close(entry.miss_rate, 0.0, 0.0);
    }
}

#[test]
fn av2_straight_k1_and_k6_metrics_and_miss_thresholds() {
    for k in [1, 6] {
        let report = case(straight(), k).both(&MetricsConfig::argoverse2());
        assert_allclose(report.at(6).unwrap().min_ade, 4.5);
        assert_close(report.at(6).unwrap().min_fde, 9.0, 0.0);
        let kept = case(straight(), k).both(&with_threshold(9.01));
        assert_close(kept.at(6).unwrap().miss_rate, 0.0, 0.0);
        let missed = case(straight(), k).both(&with_threshold(8.99));
        assert_close(missed.at(6).unwrap().miss_rate, 1.0, 0.0);
    }
}

#[test]
fn av2_diagonal_k1_metrics_and_miss() {
    let report = case(diagonal(), 1).both(&MetricsConfig::argoverse2());
    let entry = report.at(1).unwrap();
    assert_allclose(entry.min_ade, 6.3639610306789285);
    assert_allclose(entry.min_fde, 12.727922061357857);
    assert_close(entry.miss_rate, 1.0, 0.0);
}

#[test]
fn av2_brier_uniform_probabilities_straight_k6() {
    let uniform = [1.0f32 / 6.0; 6];
    let ade = brier_scores(&[4.5; 6], &uniform, false).unwrap();
    let fde = brier_scores(&[9.0; 6], &uniform, false).unwrap();
    let penalty = (5.0f64 / 6.0).powi(2);
    for (a, f) in ade.iter().zip(&fde) {
        assert_allclose(Some(*a), 4.5 + penalty);
        assert_allclose(Some(*f), 9.0 + penalty);
    }
    let report = case(straight(), 6)
        .with_probabilities(&uniform)
        .both(&MetricsConfig::argoverse2());
    assert_allclose(report.at(6).unwrap().brier_min_ade, 5.194444444444445);
    assert_allclose(report.at(6).unwrap().brier_min_fde, 9.694444444444445);
}

#[test]
fn av2_brier_confident_probabilities_straight_k6() {
    let confident = [0.9f32, 0.02, 0.02, 0.02, 0.02, 0.02];
    let ade = brier_scores(&[4.5; 6], &confident, false).unwrap();
    let fde = brier_scores(&[9.0; 6], &confident, false).unwrap();
    assert_allclose(Some(ade[0]), 4.51);
    assert_allclose(Some(fde[0]), 9.01);
    for mode in 1..6 {
        assert_allclose(Some(ade[mode]), 5.4604);
        assert_allclose(Some(fde[mode]), 9.9604);
    }
    // All modes tie on FDE; the most probable is selected.
    let report = case(straight(), 6)
        .with_probabilities(&confident)
        .both(&MetricsConfig::argoverse2());
    assert_allclose(report.at(6).unwrap().brier_min_ade, 4.51);
    assert_allclose(report.at(6).unwrap().brier_min_fde, 9.01);
}

#[test]
fn av2_brier_normalize_true_matches_confident() {
    let scaled: Vec<f32> = [0.9f32, 0.02, 0.02, 0.02, 0.02, 0.02]
        .iter()
        .map(|p| p / 10.0)
        .collect();
    let fde = brier_scores(&[9.0; 6], &scaled, true).unwrap();
    assert_allclose(Some(fde[0]), 9.01);
    assert_allclose(Some(fde[1]), 9.9604);
    let mut config = MetricsConfig::argoverse2();
    config.probabilities.check = ProbabilityCheck::UnitInterval;
    config.probabilities.renormalize = true;
    let report = case(straight(), 6)
        .with_probabilities(&scaled)
        .both(&config);
    assert_allclose(report.at(6).unwrap().brier_min_fde, 9.01);
}

#[test]
fn av2_brier_stationary_k1_certain_probability() {
    let brier = brier_scores(&[std::f64::consts::SQRT_2], &[1.0], false).unwrap();
    assert_close(Some(brier[0]), std::f64::consts::SQRT_2, 1e-12);
    let report = case(stationary(), 1)
        .with_probabilities(&[1.0])
        .both(&MetricsConfig::argoverse2());
    assert_allclose(
        report.at(1).unwrap().brier_min_fde,
        std::f64::consts::SQRT_2,
    );
}

#[test]
fn av2_brier_rejects_probabilities_above_one_without_normalize() {
    let tenfold: Vec<f32> = [0.9f32, 0.02, 0.02, 0.02, 0.02, 0.02]
        .iter()
        .map(|p| p * 10.0)
        .collect();
    assert!(matches!(
        brier_scores(&[9.0; 6], &tenfold, false),
        Err(Error::ProbabilityOutOfRange { mode: 0, .. })
    ));
    let case = case(straight(), 6).with_probabilities(&tenfold);
    for result in [
        case.host(&MetricsConfig::argoverse2()),
        case.tensor(&MetricsConfig::argoverse2()),
    ] {
        assert!(
            matches!(
                result,
                Err(Error::ProbabilityOutOfRange {
                    prediction: 0,
                    mode: 0,
                    ..
                })
            ),
            "{result:?}"
        );
    }
}

#[test]
fn av2_brier_rejects_five_probabilities_for_six_modes() {
    assert!(matches!(
        brier_scores(&[9.0; 6], &[0.2; 5], false),
        Err(Error::ShapeMismatch { .. })
    ));
    let case = case(straight(), 6).with_probabilities(&[0.2; 5]);
    assert!(matches!(
        case.host_batch(),
        Err(Error::ShapeMismatch {
            field: "probabilities",
            ..
        })
    ));
    assert!(matches!(
        case.tensor_batch(),
        Err(Error::ShapeMismatch {
            field: "probabilities",
            ..
        })
    ));
}
