//! [`TensorTrajectoryBatch`]: one batch as Burn tensors, left on their device.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, FloatDType, Tensor};

use crate::{Error, Result};

/// One batch of trajectories as Burn tensors on any backend; see
/// [`TrajectoryBatch`](crate::TrajectoryBatch) for the fields and their shapes.
///
/// Float inputs are cast to f32 on their device when the batch is built (a no-op for f32), so
/// f16 or bf16 model outputs neither mix dtypes with f32 targets nor overflow the sums.
/// Shapes are checked when the batch is built. Values (finiteness, the probability policy) are
/// checked on the device during the update, in the same pass as the metrics, and only the
/// offending row is copied to the host to name the agent and position.
#[derive(Debug, Clone)]
pub struct TensorTrajectoryBatch<B: Backend> {
    pub(crate) predictions: Tensor<B, 4>,
    pub(crate) ground_truth: Tensor<B, 3>,
    pub(crate) probabilities: Option<Tensor<B, 2>>,
    pub(crate) valid: Option<Tensor<B, 2, Bool>>,
    pub(crate) velocity: Option<Tensor<B, 2>>,
    pub(crate) heading: Option<Tensor<B, 2>>,
}

impl<B: Backend> TensorTrajectoryBatch<B> {
    /// Predictions `[N, K, T, 2]` and ground truth `[N, T, 2]`.
    pub fn new(predictions: Tensor<B, 4>, ground_truth: Tensor<B, 3>) -> Result<Self> {
        let [agents, modes, steps, coordinates] = predictions.dims();
        if modes == 0 {
            return Err(Error::NoModes);
        }
        if steps == 0 {
            return Err(Error::NoSteps);
        }
        if coordinates != 2 {
            return Err(mismatch(
                "predictions",
                format!("[{agents}, {modes}, {steps}, 2]"),
                &predictions.dims(),
            ));
        }
        if ground_truth.dims() != [agents, steps, 2] {
            return Err(mismatch(
                "ground_truth",
                format!("[{agents}, {steps}, 2]"),
                &ground_truth.dims(),
            ));
        }
        Ok(Self {
            predictions: predictions.cast(FloatDType::F32),
            ground_truth: ground_truth.cast(FloatDType::F32),
            probabilities: None,
            valid: None,
            velocity: None,
            heading: None,
        })
    }

    /// Adds mode probabilities `[P, K]`, one row per prediction.
    pub fn with_probabilities(mut self, probabilities: Tensor<B, 2>) -> Result<Self> {
        let [rows, modes] = probabilities.dims();
        // No rows only with no agents (a last shard with nothing left, say).
        if modes != self.modes() || (rows == 0 && self.agents() > 0) {
            return Err(mismatch(
                "probabilities",
                format!("[P, {}]", self.modes()),
                &[rows, modes],
            ));
        }
        self.probabilities = Some(probabilities.cast(FloatDType::F32));
        Ok(self)
    }

    /// Adds the ground-truth validity mask `[N, T]`.
    pub fn with_valid(mut self, valid: Tensor<B, 2, Bool>) -> Result<Self> {
        let expected = [self.agents(), self.steps()];
        if valid.dims() != expected {
            return Err(mismatch("valid", format!("{expected:?}"), &valid.dims()));
        }
        self.valid = Some(valid);
        Ok(self)
    }

    /// Adds each agent's velocity `[N, 2]` at the current step (m/s).
    pub fn with_velocity(mut self, velocity: Tensor<B, 2>) -> Result<Self> {
        let expected = [self.agents(), 2];
        if velocity.dims() != expected {
            return Err(mismatch(
                "velocity",
                format!("{expected:?}"),
                &velocity.dims(),
            ));
        }
        self.velocity = Some(velocity.cast(FloatDType::F32));
        Ok(self)
    }

    /// Adds the ground-truth heading `[N, T]` (radians).
    pub fn with_heading(mut self, heading: Tensor<B, 2>) -> Result<Self> {
        let expected = [self.agents(), self.steps()];
        if heading.dims() != expected {
            return Err(mismatch(
                "heading",
                format!("{expected:?}"),
                &heading.dims(),
            ));
        }
        self.heading = Some(heading.cast(FloatDType::F32));
        Ok(self)
    }

    /// Number of agents, N.
    pub fn agents(&self) -> usize {
        self.predictions.dims()[0]
    }

    /// Number of modes, K.
    pub fn modes(&self) -> usize {
        self.predictions.dims()[1]
    }

    /// Number of steps, T.
    pub fn steps(&self) -> usize {
        self.predictions.dims()[2]
    }
}

fn mismatch(field: &'static str, expected: String, actual: &[usize]) -> Error {
    Error::ShapeMismatch {
        field,
        expected,
        actual: format!("{actual:?}"),
    }
}
