//! Scenes with varying numbers of agents, padded to the largest in a batch: the padding agents,
//! masked out with an all-false validity row, change no figure, on the host and tensor paths,
//! under every preset. They still count in `units` (predictions seen), and only there.

use crate::common;

use common::Case;
use kiln_ml_metrics::MetricsConfig;

/// Enough steps for every preset's longest horizon (Waymo: 8 s at 10 Hz).
const STEPS: usize = 80;

/// `agents` agents of 3 modes and `STEPS` steps, forecasts off by a per-agent, per-mode amount.
fn scene(agents: usize) -> Case {
    let truth: Vec<Vec<[f32; 2]>> = (0..agents)
        .map(|a| (0..STEPS).map(|t| [t as f32 * 0.3, a as f32]).collect())
        .collect();
    let forecasts: Vec<Vec<Vec<[f32; 2]>>> = truth
        .iter()
        .enumerate()
        .map(|(a, path)| {
            (0..3)
                .map(|mode| {
                    let offset = 0.4 * (1 + mode) as f32 + 0.9 * a as f32;
                    path.iter()
                        .map(|&[x, y]| [x + offset, y - offset * 0.5])
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut case =
        Case::from_points(&forecasts, &truth).with_probabilities(&[0.5, 0.3, 0.2].repeat(agents));
    // Waymo's miss rule scales by speed and turns by heading.
    case.velocity = Some([3.0, 0.0].repeat(agents));
    case.heading = Some(vec![0.0; agents * STEPS]);
    case
}

/// `case` padded with `extra` agents of junk values (far off, so they would move every figure)
/// whose validity rows are all false, the real agents all valid.
fn padded(case: &Case, extra: usize) -> Case {
    let agents = case.shape.agents;
    let junk = scene(agents + extra);
    let per_agent_predictions = case.predictions.len() / agents;
    let per_agent_truth = case.ground_truth.len() / agents;
    let mut padded = junk.clone();
    padded.predictions[..case.predictions.len()].copy_from_slice(&case.predictions);
    padded.ground_truth[..case.ground_truth.len()].copy_from_slice(&case.ground_truth);
    for value in &mut padded.predictions[agents * per_agent_predictions..] {
        *value += 1_000.0;
    }
    let steps = per_agent_truth / 2;
    let mut valid = vec![true; agents * steps];
    valid.resize((agents + extra) * steps, false);
    padded.valid = Some(valid);
    padded
}

#[test]
fn padding_agents_with_all_false_masks_change_no_figure() {
    for config in [
        MetricsConfig::argoverse1(),
        MetricsConfig::argoverse2(),
        MetricsConfig::nuscenes(),
        MetricsConfig::waymo(),
    ] {
        let mut real = scene(3);
        real.valid = Some(vec![true; 3 * STEPS]);
        let expected = real.both(&config);
        for extra in [1, 5] {
            let padded = padded(&real, extra);
            let name = &config.name;
            for (report, tolerance) in [
                (padded.host(&config).unwrap(), 1e-9),
                (padded.tensor(&config).unwrap(), 1e-5),
            ] {
                let mut report = report;
                for horizon in &mut report.horizons {
                    assert_eq!(horizon.units, (3 + extra) as u64, "{name}: rows seen");
                    horizon.units = 3;
                }
                common::assert_reports_close(&report, &expected, tolerance);
            }
            // The same padded batch with the padding marked valid: the mask is what hides it.
            let mut unmasked = padded.clone();
            unmasked.valid = Some(vec![true; (3 + extra) * STEPS]);
            assert_ne!(
                unmasked.both(&config).horizons[0].ade,
                expected.horizons[0].ade,
                "{name}: without the mask the padding would count"
            );
        }
    }
}
