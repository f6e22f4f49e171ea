//! Renormalized probabilities when the kept modes carry no mass at all.

use crate::common;

use common::{Case, assert_close};
use kiln_ml_metrics::{MetricsConfig, ProbabilityCheck, Pruning};

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
