//! [`SceneBoxes`]: the ground-truth boxes of every object around the predicted agents, which
//! Waymo's overlap rate tests the predictions against.

use crate::{Error, Result};

/// Values per box: center x, center y, length, width, heading (Waymo's order).
pub const BOX_VALUES: usize = 5;

/// The boxes of all objects of the scenes in a batch, at the batch's steps.
///
/// `boxes` is `[S, O, T, 5]` (x, y, length, width, heading; `O` objects per scene, padded),
/// `valid` is `[S, O, T]`. Agent `a` of the batch is object `agent_object[a]` of scene
/// `agent_scene[a]`: its own box gives the length and width of its predicted boxes, and it is
/// not tested against itself. As in Waymo's `ComputeOverlapRate`, an object absent at the
/// current step is never tested: mark it invalid at every step. Invalid entries are not read,
/// except the agent's own length and width, which Waymo takes from its state at each step valid
/// or not (tf.Example's -1 padding makes a 1 m square; NaN padding makes no box).
///
/// ```
/// use kiln_ml_metrics::SceneBoxes;
///
/// // One scene, two objects, two steps; the predicted agent is object 0.
/// let boxes = [
///     0.0, 0.0, 4.0, 2.0, 0.0, /**/ 1.0, 0.0, 4.0, 2.0, 0.0, // object 0
///     9.0, 0.0, 4.0, 2.0, 0.0, /**/ 9.0, 0.0, 4.0, 2.0, 0.0, // object 1
/// ];
/// let scene = SceneBoxes::new(2, 2, &boxes, &[true; 4], &[0], &[0])?;
/// assert_eq!(scene.scenes(), 1);
/// # Ok::<(), kiln_ml_metrics::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SceneBoxes<'a> {
    objects: usize,
    steps: usize,
    boxes: &'a [f32],
    valid: &'a [bool],
    agent_scene: &'a [usize],
    agent_object: &'a [usize],
}

impl<'a> SceneBoxes<'a> {
    /// Checks the shapes, the indices and every valid box (finite, length and width >= 0).
    pub fn new(
        objects: usize,
        steps: usize,
        boxes: &'a [f32],
        valid: &'a [bool],
        agent_scene: &'a [usize],
        agent_object: &'a [usize],
    ) -> Result<Self> {
        let per_scene = objects * steps;
        if per_scene == 0 || !valid.len().is_multiple_of(per_scene) {
            return Err(Error::ShapeMismatch {
                field: "valid",
                expected: format!("[S, {objects}, {steps}] with S scenes, objects and steps > 0"),
                actual: format!("{} values", valid.len()),
            });
        }
        let scenes = valid.len() / per_scene;
        if boxes.len() != valid.len() * BOX_VALUES {
            return Err(Error::ShapeMismatch {
                field: "boxes",
                expected: format!("[{scenes}, {objects}, {steps}, {BOX_VALUES}]"),
                actual: format!("{} values", boxes.len()),
            });
        }
        if agent_scene.len() != agent_object.len() {
            return Err(Error::ShapeMismatch {
                field: "agent_object",
                expected: format!("one entry per agent ({})", agent_scene.len()),
                actual: format!("{} values", agent_object.len()),
            });
        }
        for (agent, (&scene, &object)) in agent_scene.iter().zip(agent_object).enumerate() {
            for (field, value, limit) in [
                ("agent_scene", scene, scenes),
                ("agent_object", object, objects),
            ] {
                if value >= limit {
                    return Err(Error::IndexOutOfRange {
                        field,
                        agent,
                        value,
                        limit,
                    });
                }
            }
        }
        for (entry, values) in boxes.chunks_exact(BOX_VALUES).enumerate() {
            if !valid[entry] {
                continue;
            }
            let reason = if values.iter().any(|v| !v.is_finite()) {
                Some(format!("non-finite value in {values:?}"))
            } else if values[2] < 0.0 || values[3] < 0.0 {
                Some(format!(
                    "negative length {} or width {}",
                    values[2], values[3]
                ))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(Error::InvalidBox {
                    scene: entry / per_scene,
                    object: entry / steps % objects,
                    step: entry % steps,
                    reason,
                });
            }
        }
        Ok(Self {
            objects,
            steps,
            boxes,
            valid,
            agent_scene,
            agent_object,
        })
    }

    /// Number of scenes.
    pub fn scenes(&self) -> usize {
        self.valid.len() / (self.objects * self.steps)
    }

    /// Objects per scene.
    pub fn objects(&self) -> usize {
        self.objects
    }

    /// Steps per object.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Number of agents the boxes are indexed for.
    pub fn agents(&self) -> usize {
        self.agent_scene.len()
    }

    /// Scene and object index of agent `agent`.
    pub(crate) fn agent(&self, agent: usize) -> (usize, usize) {
        (self.agent_scene[agent], self.agent_object[agent])
    }

    /// The box of `object` in `scene` at `step`, if valid.
    pub(crate) fn get(&self, scene: usize, object: usize, step: usize) -> Option<&'a [f32]> {
        let entry = (scene * self.objects + object) * self.steps + step;
        self.valid[entry].then(|| &self.boxes[entry * BOX_VALUES..][..BOX_VALUES])
    }

    /// The length and width of `object` in `scene` at `step`, valid or not (Waymo reads them
    /// from the track state either way).
    pub(crate) fn size(&self, scene: usize, object: usize, step: usize) -> (f32, f32) {
        let entry = (scene * self.objects + object) * self.steps + step;
        let values = &self.boxes[entry * BOX_VALUES..][..BOX_VALUES];
        (values[2], values[3])
    }

    /// The rows of agents `start..end`, for one part of a batch split over threads.
    pub(crate) fn agents_range(&self, start: usize, end: usize) -> Self {
        Self {
            agent_scene: &self.agent_scene[start..end],
            agent_object: &self.agent_object[start..end],
            ..*self
        }
    }
}
