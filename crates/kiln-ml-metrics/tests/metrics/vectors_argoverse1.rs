//! Public test vectors of Argoverse 1:
//! `argoverse/argoverse-api:tests/test_eval_forecasting.py` (values from the evaluator, see
//! reference/metrics.md section 8.2). Every case runs on the host and the flex tensor path.

use crate::common;

use common::{Case, assert_close};
use kiln_ml_metrics::{MetricReport, MetricsConfig, MissRule};

const TOLERANCE: f64 = 1e-6;
const BAD_ADE: f64 = 3.233995360286024;
const BAD_FDE: f64 = 11.313708498984761;

/// The ground truth: 30 points; the metrics depend only on the forecasts' offsets from it.
fn truth() -> Vec<[f32; 2]> {
    (0..30)
        .map(|t| [93.0 + t as f32 * 0.0625, 20.0 - t as f32 * 0.5])
        .collect()
}

fn offset(offsets: impl Fn(usize) -> [f32; 2]) -> Vec<[f32; 2]> {
    truth()
        .iter()
        .enumerate()
        .map(|(t, p)| [p[0] + offsets(t)[0], p[1] + offsets(t)[1]])
        .collect()
}

/// `good_forecast`: the ground truth shifted by (1, 0).
fn good() -> Vec<[f32; 2]> {
    offset(|_| [1.0, 0.0])
}

/// `bad_forecast`: (2, 0) for 23 steps, then drifting to (8, 8).
fn bad() -> Vec<[f32; 2]> {
    const TAIL: [[f32; 2]; 7] = [
        [3.0, 1.0],
        [4.0, 3.0],
        [5.0, 3.0],
        [6.0, 4.0],
        [7.0, 5.0],
        [7.0, 7.0],
        [8.0, 8.0],
    ];
    offset(|t| if t < 23 { [2.0, 0.0] } else { TAIL[t - 23] })
}

/// The test's evaluator call: `max_guesses = k`, `horizon = 30`, `miss_threshold = 1.0`.
fn evaluate(
    forecasts: Vec<Vec<[f32; 2]>>,
    k: usize,
    probabilities: Option<&[f32]>,
) -> MetricReport {
    let mut config = MetricsConfig::argoverse1();
    config.top_k = vec![k];
    config.miss = MissRule::FinalDistance { threshold_m: 1.0 };
    let mut case = Case::from_points(&[forecasts], &[truth()]);
    if let Some(p) = probabilities {
        case = case.with_probabilities(p);
    }
    case.both(&config)
}

struct Expected {
    min_ade: f64,
    min_fde: f64,
    miss_rate: f64,
    /// p-minADE = p-minFDE - minFDE + minADE; given as p-minFDE here since minADE = minFDE.
    p_min: Option<f64>,
    p_miss_rate: Option<f64>,
    brier: Option<f64>,
}

/// A bad forecast kept alone, its renormalized probability 1: no penalty, a miss.
fn only_a_bad_forecast_kept() -> Expected {
    Expected {
        min_ade: BAD_ADE,
        min_fde: BAD_FDE,
        miss_rate: 1.0,
        p_min: Some(BAD_FDE),
        p_miss_rate: Some(1.0),
        brier: Some(BAD_FDE),
    }
}

fn check(report: &MetricReport, k: usize, expected: Expected) {
    let entry = report.at(k).unwrap();
    assert_close(entry.min_ade, expected.min_ade, TOLERANCE);
    assert_close(entry.min_fde, expected.min_fde, TOLERANCE);
    assert_close(entry.miss_rate, expected.miss_rate, TOLERANCE);
    match expected.p_min {
        Some(p_min_fde) => {
            let penalty = p_min_fde - expected.min_fde;
            assert_close(entry.p_min_fde, p_min_fde, TOLERANCE);
            assert_close(entry.p_min_ade, expected.min_ade + penalty, TOLERANCE);
            assert_close(entry.p_miss_rate, expected.p_miss_rate.unwrap(), TOLERANCE);
            let brier = expected.brier.unwrap() - expected.min_fde;
            assert_close(entry.brier_min_fde, expected.brier.unwrap(), TOLERANCE);
            assert_close(entry.brier_min_ade, expected.min_ade + brier, TOLERANCE);
        }
        None => {
            assert_eq!(entry.p_min_fde, None);
            assert_eq!(entry.brier_min_ade, None);
            assert_eq!(entry.p_miss_rate, None);
        }
    }
}

#[test]
fn av1_case_1_good_and_bad_k2_probabilities_08_02() {
    let report = evaluate(vec![good(), bad()], 2, Some(&[0.8, 0.2]));
    check(
        &report,
        2,
        Expected {
            min_ade: 1.0,
            min_fde: 1.0,
            miss_rate: 0.0,
            p_min: Some(1.2231435513142097),
            p_miss_rate: Some(0.2),
            brier: Some(1.04),
        },
    );
}

#[test]
fn av1_case_2_one_bad_forecast_with_k2_is_not_penalized() {
    let report = evaluate(vec![bad()], 2, Some(&[1.0]));
    check(&report, 2, only_a_bad_forecast_kept());
}

#[test]
fn av1_case_3_top_1_by_probability_keeps_the_bad_forecast() {
    let report = evaluate(vec![good(), bad()], 1, Some(&[0.2, 0.8]));
    check(
        &report,
        1,
        Expected {
            min_ade: BAD_ADE,
            min_fde: BAD_FDE,
            miss_rate: 1.0,
            // The kept probability renormalizes to 1: no penalty.
            p_min: Some(BAD_FDE),
            p_miss_rate: Some(1.0),
            brier: Some(BAD_FDE),
        },
    );
}

#[test]
fn av1_case_4_unnormalized_probabilities_are_renormalized() {
    let report = evaluate(vec![good(), bad()], 2, Some(&[0.3, 0.2]));
    check(
        &report,
        2,
        Expected {
            min_ade: 1.0,
            min_fde: 1.0,
            miss_rate: 0.0,
            p_min: Some(1.5108256237659907),
            p_miss_rate: Some(0.4),
            brier: Some(1.16),
        },
    );
}

#[test]
fn av1_case_5_equal_probabilities() {
    let report = evaluate(vec![good(), bad()], 2, Some(&[0.5, 0.5]));
    check(
        &report,
        2,
        Expected {
            min_ade: 1.0,
            min_fde: 1.0,
            miss_rate: 0.0,
            p_min: Some(1.6931471805599454),
            p_miss_rate: Some(0.5),
            brier: Some(1.25),
        },
    );
}

/// Not in Argoverse's tests: its `np.argsort([-p], kind="stable")` keeps equal probabilities
/// in submission order, so at K = 1 the first of two tied modes is kept (a bad one here).
#[test]
fn av1_equal_probabilities_keep_the_first_submitted() {
    let report = evaluate(vec![bad(), good(), bad()], 1, Some(&[0.4, 0.4, 0.2]));
    check(&report, 1, only_a_bad_forecast_kept());
}

#[test]
fn av1_case_6_first_k_without_probabilities() {
    let report = evaluate(vec![bad(), bad(), good()], 2, None);
    check(
        &report,
        2,
        Expected {
            min_ade: BAD_ADE,
            min_fde: BAD_FDE,
            miss_rate: 1.0,
            p_min: None,
            p_miss_rate: None,
            brier: None,
        },
    );
}

#[test]
fn av1_horizon_truncates_longer_trajectories_to_30_steps() {
    // A 40-step forecast whose last 10 steps are far off scores as the 30-step good forecast.
    let mut long_truth = truth();
    long_truth.extend((30..40).map(|t| [t as f32, 0.0]));
    let mut long_good = good();
    long_good.extend((30..40).map(|t| [t as f32 + 50.0, 0.0]));
    let mut config = MetricsConfig::argoverse1();
    config.top_k = vec![1];
    let report = Case::from_points(&[vec![long_good]], &[long_truth]).both(&config);
    assert_close(report.at(1).unwrap().min_fde, 1.0, TOLERANCE);
    assert_eq!(report.horizons[0].last_step, Some(29));
}
