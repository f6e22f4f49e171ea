//! Renormalized probabilities when the kept modes carry no mass at all.

use crate::common;

use common::{Case, assert_close};
use kiln_ml_core::Metric;
use kiln_ml_metrics::{
    BatchShape, Error, MetricsConfig, ProbabilityCheck, Pruning, TieOrder, TrajectoryMetrics,
    ZeroMass,
};

#[test]
fn kept_modes_without_mass_get_probability_zero_not_nan() {
    // First-K pruning with renormalization (the Waymo policy) keeps mode 0 alone at K = 1,
    // and mode 0 has probability 0.
    let mut config = MetricsConfig::argoverse2();
    config.top_k = vec![1, 3];
    config.pruning = Pruning::FirstK;
    config.probabilities.check = ProbabilityCheck::NonNegative;
    config.probabilities.renormalize = true;
    let truth = vec![[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]];
    let mode = |y: f32| vec![[0.0, y], [1.0, y], [2.0, y]];
    let case = Case::from_points(&[vec![mode(0.5), mode(1.0), mode(3.0)]], &[truth])
        .with_probabilities(&[0.0, 0.5, 0.5]);

    let report = case.both(&config);
    let top1 = &report.horizons[0].top_k[0];
    assert_close(top1.min_fde, 0.5, 1e-6);
    // p = 0 after renormalizing: brier adds (1 - 0)^2 = 1.
    assert_close(top1.brier_min_fde, 1.5, 1e-6);
    let top3 = &report.horizons[0].top_k[1];
    assert!(top3.brier_min_fde.is_some_and(f64::is_finite));
}

/// Waymo's policy: kept modes without mass share it equally, on the host and on the device;
/// the default policy refuses a row that sums to zero, naming the prediction.
#[test]
fn kept_modes_without_mass_share_it_uniformly_under_waymo() {
    assert_eq!(
        MetricsConfig::waymo().probabilities.zero_mass,
        ZeroMass::Uniform
    );
    for pruning in [
        Pruning::FirstK,
        Pruning::ByProbability {
            ties: TieOrder::LowerIndexFirst,
        },
    ] {
        uniform_under(pruning);
    }
}

fn uniform_under(pruning: Pruning) {
    let mut config = MetricsConfig::argoverse2();
    config.top_k = vec![1, 3];
    config.pruning = pruning;
    config.probabilities.check = ProbabilityCheck::NonNegative;
    config.probabilities.renormalize = true;
    config.probabilities.zero_mass = ZeroMass::Uniform;
    let truth = vec![[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]];
    let mode = |y: f32| vec![[0.0, y], [1.0, y], [2.0, y]];
    let case = |probabilities: &[f32]| {
        Case::from_points(
            &[vec![mode(0.5), mode(1.0), mode(3.0)]],
            std::slice::from_ref(&truth),
        )
        .with_probabilities(probabilities)
    };

    if pruning == Pruning::FirstK {
        // Mode 0 alone is kept at K = 1, without mass: it gets all of it.
        let report = case(&[0.0, 0.5, 0.5]).both(&config);
        assert_close(report.horizons[0].top_k[0].brier_min_fde, 0.5, 1e-6);
    }
    // Every confidence 0: at K = 3 the closest mode gets a third.
    let all_zero = case(&[0.0, 0.0, 0.0]);
    let report = all_zero.both(&config);
    assert_close(report.horizons[0].top_k[0].brier_min_fde, 0.5, 1e-6);
    let third = 0.5 + (1.0f64 - 1.0 / 3.0).powi(2);
    assert_close(report.horizons[0].top_k[1].brier_min_fde, third, 1e-6);

    config.probabilities.zero_mass = ZeroMass::Refuse;
    for refused in [all_zero.host(&config), all_zero.tensor(&config)] {
        let error = refused.expect_err("a row summing to zero");
        assert!(
            matches!(error, Error::ProbabilitiesSumToZero { prediction: 0 }),
            "{error}"
        );
    }
}

/// Waymo's probability policy (K = 2) on three steps with the final-distance miss.
fn waymo_on_three_steps() -> MetricsConfig {
    let mut config = MetricsConfig::waymo();
    config.horizons = MetricsConfig::argoverse2().horizons;
    config.miss = MetricsConfig::argoverse2().miss;
    config.top_k = vec![2];
    config
}

/// Two modes 0.5 m and 1 m beside a straight three-step truth, with these scores: minFDE 0.5
/// from mode 0.
fn two_modes(scores: &[f32]) -> Case {
    let truth = vec![[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]];
    let mode = |y: f32| vec![[0.0, y], [1.0, y], [2.0, y]];
    Case::from_points(&[vec![mode(0.5), mode(1.0)]], &[truth]).with_probabilities(scores)
}

/// Waymo's confidences may be negative (its code neither checks nor normalizes them). Where the
/// kept scores sum to a positive value they renormalize as given; where the sum is not positive
/// the row has no mass, shared equally under Waymo's policy; the host and the device agree.
#[test]
fn negative_scores_renormalize_on_the_device_as_on_the_host_under_waymo() {
    let config = waymo_on_three_steps();
    let brier = |scores: &[f32]| {
        let report = two_modes(scores).both(&config);
        report.horizons[0].top_k[0].brier_min_fde
    };
    // minFDE 0.5 from mode 0, plus (1 - p)^2 for its renormalized probability p.
    assert_close(brier(&[2.0, -1.0]), 0.5 + 1.0, 1e-6); // p = 2 / 1
    assert_close(brier(&[0.5, -1.0]), 0.5 + 0.25, 1e-6); // sum -0.5: no mass, p = 1/2
    assert_close(brier(&[-1.0, -3.0]), 0.5 + 0.25, 1e-6); // sum -4: no mass, p = 1/2

    // The scores' own policies still refuse them, on both paths, naming the mode.
    let case = two_modes(&[0.5, -1.0]);
    for mut refusing in [MetricsConfig::argoverse1(), config.clone()] {
        refusing.horizons = config.horizons.clone();
        refusing.probabilities.check = ProbabilityCheck::NonNegative;
        for refused in [case.host(&refusing), case.tensor(&refusing)] {
            let error = refused.expect_err("a negative score");
            assert!(
                matches!(error, Error::ProbabilityOutOfRange { mode: 1, .. }),
                "{error}"
            );
        }
    }
}

/// `Finite` scores under `Refuse`: a row whose whole sum is positive passes the check, but its
/// kept modes may sum to less than zero (first-K pruning): no mass, probability 0, on the host
/// and on the device alike.
#[test]
fn kept_scores_summing_below_zero_get_probability_zero_under_refuse() {
    let mut config = MetricsConfig::argoverse2();
    config.horizons = MetricsConfig::argoverse2().horizons;
    config.top_k = vec![1];
    config.pruning = Pruning::FirstK;
    config.probabilities.check = ProbabilityCheck::Finite;
    config.probabilities.renormalize = true;
    config.probabilities.zero_mass = ZeroMass::Refuse;
    let report = two_modes(&[-1.0, 3.0]).both(&config);
    // minFDE 0.5 from mode 0, the only kept one; p = 0: brier adds 1.
    assert_close(report.horizons[0].top_k[0].brier_min_fde, 1.5, 1e-6);
}

/// Scores need not sum to one under renormalization (Waymo's may be any finite value): the
/// device's f32 sum of two scores near f32's largest would overflow to infinity and give
/// probability 0 where the host's f64 sum gives a half.
#[test]
fn huge_scores_renormalize_on_the_device_as_on_the_host() {
    let report = two_modes(&[3.0e38, 3.0e38]).both(&waymo_on_three_steps());
    // minFDE 0.5 from mode 0, whose renormalized probability is a half.
    assert_close(report.horizons[0].top_k[0].brier_min_fde, 0.75, 1e-6);
}

/// A batch without agents (a last shard with nothing left) may carry an empty `[0, K]`
/// probability matrix on both paths and changes nothing; with agents, no rows is refused.
#[test]
fn an_empty_batch_may_carry_empty_probabilities_and_changes_nothing() {
    let config = waymo_on_three_steps();
    let empty = Case {
        shape: BatchShape::new(0, 2, 3),
        predictions: Vec::new(),
        ground_truth: Vec::new(),
        probabilities: Some(Vec::new()),
        valid: None,
        velocity: None,
        heading: None,
    };
    let filled = two_modes(&[0.25, 0.75]);
    let expected = filled.both(&config);

    let mut host = TrajectoryMetrics::new(config.clone()).unwrap();
    host.update(&empty.host_batch().unwrap()).unwrap();
    host.update(&filled.host_batch().unwrap()).unwrap();
    assert_eq!(host.compute(), expected);
    let mut tensor = TrajectoryMetrics::new(config.clone()).unwrap();
    tensor.update(&empty.tensor_batch().unwrap()).unwrap();
    tensor.update(&filled.tensor_batch().unwrap()).unwrap();
    common::assert_reports_close(&tensor.compute(), &expected, common::PATH_TOLERANCE);

    let mut no_rows = filled.clone();
    no_rows.probabilities = Some(Vec::new());
    for refused in [no_rows.host_batch().err(), no_rows.tensor_batch().err()] {
        assert!(
            matches!(
                refused,
                Some(Error::ShapeMismatch {
                    field: "probabilities",
                    ..
                })
            ),
            "{refused:?}"
        );
    }
}

/// A row whose sum is past the tolerance in f64 but rounds inside it in f32 is refused on the
/// device as on the host: 1 plus five values of 4e-8 sums to 1 + 2e-7 in f64 and to exactly 1
/// in f32 (each addition rounds back to 1).
#[test]
fn a_sum_past_the_tolerance_only_in_f64_is_refused_on_both_paths() {
    let mut config = MetricsConfig::argoverse2();
    config.probabilities.check = ProbabilityCheck::SumToOne { tolerance: 1e-7 };
    let truth = vec![[0.0, 0.0], [1.0, 0.0]];
    let mode = |y: f32| vec![[0.0, y], [1.0, y]];
    let modes: Vec<_> = (0..6).map(|m| mode(m as f32)).collect();
    let case = Case::from_points(&[modes], &[truth])
        .with_probabilities(&[1.0, 4e-8, 4e-8, 4e-8, 4e-8, 4e-8]);
    for (path, result) in [
        ("host", case.host(&config)),
        ("tensor", case.tensor(&config)),
    ] {
        assert!(
            matches!(
                result,
                Err(Error::ProbabilitiesNotNormalized { prediction: 0, .. })
            ),
            "{path}: {result:?}"
        );
    }
    // Within the tolerance in f64 too: accepted on both.
    config.probabilities.check = ProbabilityCheck::SumToOne { tolerance: 1e-6 };
    assert_eq!(case.host(&config).unwrap(), case.tensor(&config).unwrap());
}

/// Scores of both signs whose sum is below zero in f64 and may round above it in f32 are
/// refused on the device as on the host under `ZeroMass::Refuse`.
#[test]
fn scores_summing_below_zero_only_in_f64_are_refused_on_both_paths() {
    let mut config = MetricsConfig::argoverse2();
    config.probabilities.check = ProbabilityCheck::Finite;
    config.probabilities.renormalize = true;
    config.probabilities.zero_mass = ZeroMass::Refuse;
    let truth = vec![[0.0, 0.0], [1.0, 0.0]];
    let mode = |y: f32| vec![[0.0, y], [1.0, y]];
    let modes: Vec<_> = (0..4).map(|m| mode(m as f32)).collect();
    // 5 + 1e8 rounds to 1e8 in f32, so the f32 sum is 1e8 - 1e8 - 6 = -6 or, in another order,
    // 2; the f64 sum is -1.
    let case = Case::from_points(&[modes], &[truth]).with_probabilities(&[5.0, 1e8, -1e8, -6.0]);
    for (path, result) in [
        ("host", case.host(&config)),
        ("tensor", case.tensor(&config)),
    ] {
        assert!(
            matches!(result, Err(Error::ProbabilitiesSumToZero { prediction: 0 })),
            "{path}: {result:?}"
        );
    }
}
