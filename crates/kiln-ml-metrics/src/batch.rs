//! [`TrajectoryBatch`]: one batch of predictions and ground truth as borrowed host slices.

use crate::input_checks::{check_finite, check_len};
use crate::scene_boxes::SceneBoxes;
use crate::trajectory_type::TrajectoryType;
use crate::{Error, Result};

/// The dimensions of a batch: `agents` (N), `modes` (K) and `steps` (T).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchShape {
    /// Number of agents, N.
    pub agents: usize,
    /// Number of hypotheses per agent, K.
    pub modes: usize,
    /// Number of future time steps, T.
    pub steps: usize,
}

impl BatchShape {
    /// A shape of `agents` x `modes` x `steps`.
    pub fn new(agents: usize, modes: usize, steps: usize) -> Self {
        Self {
            agents,
            modes,
            steps,
        }
    }
}

/// One batch of trajectories as row-major `f32` slices, validated once when built.
///
/// | field | shape | required |
/// |---|---|---|
/// | predictions | `[N, K, T, 2]` (x, y in meters) | yes |
/// | ground truth | `[N, T, 2]` | yes |
/// | probabilities | `[P, K]`, P = N / agents per prediction | for brier and p- metrics, ranking |
/// | validity mask | `[N, T]` | no: every step is valid |
/// | velocity | `[N, 2]` (vx, vy at the current step, m/s) | for Waymo's miss rule |
/// | heading | `[N, T]` (ground-truth yaw, radians) | for Waymo's miss rule |
///
/// Every value must be finite; errors name the field, agent and position. Probability rules
/// that depend on the policy are checked when the batch is measured.
///
/// ```
/// use kiln_ml_metrics::{BatchShape, TrajectoryBatch};
///
/// let ground_truth = [0.0, 0.0, 1.0, 0.0];
/// let predictions = [0.0, 0.0, 1.0, 1.0, /* second mode */ 0.0, 0.0, 1.0, 0.0];
/// let batch = TrajectoryBatch::new(BatchShape::new(1, 2, 2), &predictions, &ground_truth)?
///     .with_probabilities(&[0.4, 0.6])?;
/// assert_eq!(batch.shape().modes, 2);
///
/// let broken = [0.0, f32::NAN, 1.0, 0.0];
/// let error = TrajectoryBatch::new(BatchShape::new(1, 2, 2), &predictions, &broken).unwrap_err();
/// assert!(error.to_string().contains("ground_truth` at agent 0 (step 0, y)"));
/// # Ok::<(), kiln_ml_metrics::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TrajectoryBatch<'a> {
    shape: BatchShape,
    predictions: &'a [f32],
    ground_truth: &'a [f32],
    probabilities: Option<&'a [f32]>,
    valid: Option<&'a [bool]>,
    velocity: Option<&'a [f32]>,
    heading: Option<&'a [f32]>,
    trajectory_types: Option<&'a [Option<TrajectoryType>]>,
    boxes: Option<SceneBoxes<'a>>,
}

impl<'a> TrajectoryBatch<'a> {
    /// A batch of predictions `[N, K, T, 2]` and ground truth `[N, T, 2]`.
    pub fn new(shape: BatchShape, predictions: &'a [f32], ground_truth: &'a [f32]) -> Result<Self> {
        if shape.modes == 0 {
            return Err(Error::NoModes);
        }
        if shape.steps == 0 {
            return Err(Error::NoSteps);
        }
        let BatchShape {
            agents: n,
            modes: k,
            steps: t,
        } = shape;
        check_len("predictions", predictions.len(), &[n, k, t, 2])?;
        check_len("ground_truth", ground_truth.len(), &[n, t, 2])?;
        check_finite(
            "predictions",
            predictions,
            &[k, t, 2],
            &["mode", "step", ""],
        )?;
        check_finite("ground_truth", ground_truth, &[t, 2], &["step", ""])?;
        Ok(Self {
            shape,
            predictions,
            ground_truth,
            probabilities: None,
            valid: None,
            velocity: None,
            heading: None,
            trajectory_types: None,
            boxes: None,
        })
    }

    /// Adds mode probabilities `[P, K]`: one row per prediction (per agent unless agents form
    /// joint predictions). Values must be finite; the policy's range checks run at update.
    pub fn with_probabilities(mut self, probabilities: &'a [f32]) -> Result<Self> {
        let k = self.shape.modes;
        // Empty only with no agents (a last shard with nothing left, say).
        if !probabilities.len().is_multiple_of(k)
            || (probabilities.is_empty() && self.shape.agents > 0)
        {
            return Err(Error::ShapeMismatch {
                field: "probabilities",
                expected: format!("[P, {k}] (a positive multiple of {k} values)"),
                actual: format!("{} values", probabilities.len()),
            });
        }
        check_finite("probabilities", probabilities, &[k], &["mode"])?;
        self.probabilities = Some(probabilities);
        Ok(self)
    }

    /// Adds the ground-truth validity mask `[N, T]`.
    pub fn with_valid(mut self, valid: &'a [bool]) -> Result<Self> {
        check_len("valid", valid.len(), &[self.shape.agents, self.shape.steps])?;
        self.valid = Some(valid);
        Ok(self)
    }

    /// Adds each agent's velocity `[N, 2]` at the current step (m/s), for Waymo's miss rule.
    pub fn with_velocity(mut self, velocity: &'a [f32]) -> Result<Self> {
        check_len("velocity", velocity.len(), &[self.shape.agents, 2])?;
        check_finite("velocity", velocity, &[2], &[""])?;
        self.velocity = Some(velocity);
        Ok(self)
    }

    /// Adds the ground-truth heading `[N, T]` (radians), for Waymo's miss rule.
    pub fn with_heading(mut self, heading: &'a [f32]) -> Result<Self> {
        check_len(
            "heading",
            heading.len(),
            &[self.shape.agents, self.shape.steps],
        )?;
        check_finite("heading", heading, &[self.shape.steps], &["step"])?;
        self.heading = Some(heading);
        Ok(self)
    }

    /// Adds each agent's [`TrajectoryType`] (`[N]`; `None` where the track cannot be
    /// classified), which turns on Waymo's mAP and soft mAP; they also need probabilities.
    pub fn with_trajectory_types(
        mut self,
        trajectory_types: &'a [Option<TrajectoryType>],
    ) -> Result<Self> {
        check_len(
            "trajectory_types",
            trajectory_types.len(),
            &[self.shape.agents],
        )?;
        self.trajectory_types = Some(trajectory_types);
        Ok(self)
    }

    /// Adds the boxes of the objects around the agents, which turns on Waymo's overlap rate.
    pub fn with_boxes(mut self, boxes: SceneBoxes<'a>) -> Result<Self> {
        check_len("boxes (agents)", boxes.agents(), &[self.shape.agents])?;
        check_len("boxes (steps)", boxes.steps(), &[self.shape.steps])?;
        self.boxes = Some(boxes);
        Ok(self)
    }

    /// Each agent's trajectory type, if given.
    pub fn trajectory_types(&self) -> Option<&'a [Option<TrajectoryType>]> {
        self.trajectory_types
    }

    /// The scene boxes, if given.
    pub fn boxes(&self) -> Option<&SceneBoxes<'a>> {
        self.boxes.as_ref()
    }

    /// The batch's dimensions.
    pub fn shape(&self) -> BatchShape {
        self.shape
    }

    /// Predictions `[N, K, T, 2]`.
    pub fn predictions(&self) -> &'a [f32] {
        self.predictions
    }

    /// Ground truth `[N, T, 2]`.
    pub fn ground_truth(&self) -> &'a [f32] {
        self.ground_truth
    }

    /// Mode probabilities `[P, K]`, if given.
    pub fn probabilities(&self) -> Option<&'a [f32]> {
        self.probabilities
    }

    /// Validity mask `[N, T]`, if given.
    pub fn valid(&self) -> Option<&'a [bool]> {
        self.valid
    }

    /// Velocity `[N, 2]`, if given.
    pub fn velocity(&self) -> Option<&'a [f32]> {
        self.velocity
    }

    /// Heading `[N, T]`, if given.
    pub fn heading(&self) -> Option<&'a [f32]> {
        self.heading
    }

    /// The agents `start..end` as a batch of their own (joint predictions must not be split).
    pub(crate) fn agents(&self, start: usize, end: usize, agents_per_prediction: usize) -> Self {
        let BatchShape { modes, steps, .. } = self.shape;
        let range = |slice: &'a [f32], per_agent: usize| &slice[start * per_agent..end * per_agent];
        Self {
            shape: BatchShape::new(end - start, modes, steps),
            predictions: range(self.predictions, modes * steps * 2),
            ground_truth: range(self.ground_truth, steps * 2),
            probabilities: self.probabilities.map(|p| {
                &p[start / agents_per_prediction * modes..end / agents_per_prediction * modes]
            }),
            valid: self.valid.map(|v| &v[start * steps..end * steps]),
            velocity: self.velocity.map(|v| range(v, 2)),
            heading: self.heading.map(|h| range(h, steps)),
            trajectory_types: self.trajectory_types.map(|t| &t[start..end]),
            boxes: self.boxes.map(|b| b.agents_range(start, end)),
        }
    }
}
