//! The one error type of kiln-ml-metrics.

/// A `Result` whose error is kiln-ml-metrics' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What was wrong with a configuration or an input batch.
///
/// Every variant names the field and, for values, the agent (or joint prediction) index and the
/// position inside it, so a bad batch can be found without a debugger. A rejected batch leaves
/// the metric state unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value that cannot work.
    #[error("invalid metrics configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, naming the field.
        reason: String,
    },
    /// An input whose length or shape does not match the batch shape.
    #[error("shape mismatch in `{field}`: expected {expected}, got {actual}")]
    ShapeMismatch {
        /// The input field (`predictions`, `ground_truth`, `probabilities`, ...).
        field: &'static str,
        /// The shape or length it must have.
        expected: String,
        /// The shape or length it has.
        actual: String,
    },
    /// A batch with zero modes (K = 0): there is no hypothesis to score.
    #[error("the predictions have no modes (K = 0): at least one hypothesis per agent is needed")]
    NoModes,
    /// A batch with zero time steps (T = 0).
    #[error("the trajectories have no time steps (T = 0)")]
    NoSteps,
    /// A horizon whose last step lies beyond the trajectories.
    #[error(
        "horizon {horizon} ends at step {last_step}, but the trajectories have only {steps} steps"
    )]
    HorizonOutOfRange {
        /// Index of the horizon in the configuration.
        horizon: usize,
        /// Its last step (0-based).
        last_step: usize,
        /// Number of steps in the batch.
        steps: usize,
    },
    /// A NaN or infinite value.
    #[error("non-finite value {value} in `{field}` at agent {agent} ({position})")]
    NonFinite {
        /// The input field.
        field: &'static str,
        /// Agent index in the batch (prediction index for `probabilities`).
        agent: usize,
        /// Where inside the agent's row, in words (`mode 2, step 17, y`).
        position: String,
        /// The offending value.
        value: f32,
    },
    /// A probability outside the range the policy allows.
    #[error("probability {value} of prediction {prediction}, mode {mode} is outside {allowed}")]
    ProbabilityOutOfRange {
        /// Prediction index (the agent index unless agents are grouped into joint predictions).
        prediction: usize,
        /// Mode index.
        mode: usize,
        /// The offending probability.
        value: f32,
        /// The allowed range, in words.
        allowed: &'static str,
    },
    /// Probabilities that must sum to one but do not.
    #[error(
        "probabilities of prediction {prediction} sum to {sum}, not 1 (tolerance {tolerance}); \
         renormalize them or choose a policy that does"
    )]
    ProbabilitiesNotNormalized {
        /// Prediction index.
        prediction: usize,
        /// Their sum.
        sum: f64,
        /// The tolerance allowed by the policy.
        tolerance: f64,
    },
    /// Probabilities that must be renormalized but sum to zero (all zero, or scores of a
    /// [`ProbabilityCheck::Finite`](crate::ProbabilityCheck) policy whose sum is not positive).
    #[error(
        "probabilities of prediction {prediction} sum to zero or less and cannot be renormalized"
    )]
    ProbabilitiesSumToZero {
        /// Prediction index.
        prediction: usize,
    },
    /// An input the configured policy needs but the batch lacks.
    #[error("the batch has no `{field}`, which {needed_by} needs")]
    MissingInput {
        /// The missing field.
        field: &'static str,
        /// What needs it.
        needed_by: &'static str,
    },
    /// A batch whose agents do not split into whole joint predictions.
    #[error("{agents} agents cannot be grouped into joint predictions of {agents_per_prediction}")]
    AgentsNotGroupable {
        /// Number of agents in the batch.
        agents: usize,
        /// Agents per joint prediction in the configuration.
        agents_per_prediction: usize,
    },
    /// An object box for the overlap rate that cannot be measured.
    #[error("box of object {object} in scene {scene} at step {step}: {reason}")]
    InvalidBox {
        /// Scene index.
        scene: usize,
        /// Object index within the scene.
        object: usize,
        /// Step index.
        step: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An index of [`SceneBoxes`](crate::SceneBoxes) pointing outside its table.
    #[error("`{field}` of agent {agent} is {value}, but there are only {limit}")]
    IndexOutOfRange {
        /// The index field.
        field: &'static str,
        /// The agent whose index it is.
        agent: usize,
        /// The index.
        value: usize,
        /// The number of entries it indexes.
        limit: usize,
    },
    /// Two metric states with different configurations cannot be merged.
    #[error("cannot merge metrics of different configurations ({left} and {right})")]
    ConfigMismatch {
        /// Name of this state's configuration.
        left: String,
        /// Name of the other state's configuration.
        right: String,
    },
    /// The tensor backend failed while the metrics were read back from the device.
    #[error("reading the metric sums back from the device failed: {reason}")]
    Device {
        /// The backend's message.
        reason: String,
    },
    /// An input found invalid when its measurements were read back, after later batches were
    /// queued ([`DeviceTrajectoryMetrics`](crate::DeviceTrajectoryMetrics)).
    #[error("batch {batch} of the pass (counted from 0): {source}")]
    InBatch {
        /// The batch's index among those updated since the last reset.
        batch: u64,
        /// What was wrong with it.
        source: Box<Error>,
    },
}
