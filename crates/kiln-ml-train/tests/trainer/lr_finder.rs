//! The learning-rate range test on a real model.

use burn::backend::{Autodiff, Flex};
use kiln_ml_train::{LrFinder, TrainerConfig};

use crate::common;

type B = Autodiff<Flex>;

#[test]
fn the_range_test_suggests_a_rate_before_divergence_and_leaves_the_model_alone() {
    let device = Default::default();
    let model = common::model::<B>(&device, 1);
    let before = common::params(&model);
    let batches = common::batches::<B>(150, 32, 9, &device);
    let finder = LrFinder::new(1e-5, 100.0, 120);
    let finding = finder
        .run(
            model.clone(),
            burn::optim::SgdConfig::new().init(),
            TrainerConfig::new(),
            device,
            batches.into_iter().map(Ok::<_, std::io::Error>),
        )
        .unwrap();
    // SGD at rates near 100 blows the loss up: the sweep stops before its 120 steps.
    assert!(finding.diverged, "{:?}", finding.losses);
    let steps = finding.losses.len();
    assert!(steps > 20 && steps < 120, "{steps} steps");
    // The rates grow by the same factor every step: (100 / 1e-5)^(1/119).
    let factor = (100.0f64 / 1e-5).powf(1.0 / 119.0);
    for pair in finding.learning_rates.windows(2) {
        assert!((pair[1] / pair[0] / factor - 1.0).abs() < 1e-9);
    }
    let suggestion = finding.suggestion.expect("a suggestion");
    let last = *finding.learning_rates.last().unwrap();
    assert!(
        suggestion > 1e-5 && suggestion < last,
        "{suggestion} of {last}"
    );
    // Where the suggestion is, the smoothed loss is falling.
    let at = finding
        .learning_rates
        .iter()
        .position(|lr| *lr == suggestion)
        .unwrap();
    assert!(
        finding.smoothed[at + 1] < finding.smoothed[at - 1],
        "{:?}",
        finding.smoothed
    );
    assert_eq!(
        common::params(&model),
        before,
        "the caller's model was trained"
    );
}
