//! Waymo's overlap rate of one prediction (`ComputeOverlapRate` in `motion_metrics.cc`): whether
//! its most confident hypothesis runs into another object's box.

use crate::batch::TrajectoryBatch;
use crate::mode_errors::BatchPlan;
use crate::oriented_box::OrientedBox;
use crate::scene_boxes::SceneBoxes;
use crate::sums::MetricSums;

/// Adds one prediction's overlap flag at every horizon and K.
pub(crate) fn add_overlap(
    plan: &BatchPlan,
    batch: &TrajectoryBatch<'_>,
    boxes: &SceneBoxes<'_>,
    agents: std::ops::Range<usize>,
    order: &[usize],
    probabilities: Option<&[f32]>,
    sums: &mut MetricSums,
) {
    for (index, &kept) in plan.kept.iter().enumerate() {
        let mode = most_confident(&order[..kept], probabilities);
        // The first step at which any agent of the hypothesis overlaps, up to the last horizon.
        let first = agents
            .clone()
            .filter_map(|agent| first_overlap(batch, boxes, agent, mode, plan.max_step))
            .min();
        for (h, horizon) in sums.horizons.iter_mut().enumerate() {
            let overlapped = first.is_some_and(|step| step <= plan.last_steps[h]);
            horizon.top_k[index]
                .overlap
                .add(if overlapped { 1.0 } else { 0.0 });
        }
    }
}

/// The kept mode of highest normalized confidence, the first in `kept` order on ties (Waymo
/// normalizes in `float` over all modes, uniform when they sum to 0); without probabilities,
/// the first kept mode.
fn most_confident(kept: &[usize], probabilities: Option<&[f32]>) -> usize {
    let Some(p) = probabilities else {
        return kept[0];
    };
    let sum: f32 = p.iter().sum();
    let normalized = |mode: usize| if sum == 0.0 { 1.0 } else { p[mode] / sum };
    let mut best = kept[0];
    for &mode in &kept[1..] {
        if normalized(mode) > normalized(best) {
            best = mode;
        }
    }
    best
}

/// The first step (up to `max_step`) at which `agent`'s hypothesis `mode` overlaps the box of
/// another valid object of its scene.
fn first_overlap(
    batch: &TrajectoryBatch<'_>,
    boxes: &SceneBoxes<'_>,
    agent: usize,
    mode: usize,
    max_step: usize,
) -> Option<usize> {
    let shape = batch.shape();
    let steps = shape.steps;
    // Waymo's predicted box needs a heading from two points; a single point has no box.
    if steps < 2 {
        return None;
    }
    let track = &batch.predictions()[(agent * shape.modes + mode) * steps * 2..][..steps * 2];
    let point = |step: usize| [f64::from(track[step * 2]), f64::from(track[step * 2 + 1])];
    let angle = |from: [f64; 2], to: [f64; 2]| (to[1] - from[1]).atan2(to[0] - from[0]);
    let (scene, own) = boxes.agent(agent);
    (0..=max_step.min(steps - 1)).find(|&step| {
        let heading = if step == 0 {
            angle(point(0), point(1))
        } else if step == steps - 1 {
            angle(point(step - 1), point(step))
        } else {
            // Waymo's `AverageAngle` of the headings to the next and from the previous point.
            let next = angle(point(step), point(step + 1));
            let previous = angle(point(step - 1), point(step));
            (next.sin() + previous.sin()).atan2(next.cos() + previous.cos())
        };
        let (length, width) = boxes.size(scene, own, step);
        let predicted = OrientedBox::new(point(step), heading, f64::from(length), f64::from(width));
        (0..boxes.objects())
            .filter(|&object| object != own)
            .filter_map(|object| boxes.get(scene, object, step))
            .any(|other| {
                let other = OrientedBox::new(
                    [f64::from(other[0]), f64::from(other[1])],
                    f64::from(other[4]),
                    f64::from(other[2]),
                    f64::from(other[3]),
                );
                predicted.overlaps(&other)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_confident_kept_mode_is_the_first_maximum() {
        assert_eq!(most_confident(&[0, 1, 2], Some(&[0.2, 0.5, 0.5])), 1);
        assert_eq!(most_confident(&[0, 2], Some(&[0.2, 0.5, 0.3])), 2);
        assert_eq!(most_confident(&[1, 0], Some(&[0.0, 0.0])), 1);
        assert_eq!(most_confident(&[2, 0], None), 2);
    }
}
