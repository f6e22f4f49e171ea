//! One timed interval on the profile's timeline.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a span measured: one of the trainer's phases, the rest of a step, or a whole step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// Waiting for the next batch.
    DataWait,
    /// Copying the batch to the device.
    HostToDevice,
    /// The forward pass and the loss.
    Forward,
    /// The backward pass.
    Backward,
    /// Unscaling, the finiteness check, clipping and the optimizer step.
    Optimizer,
    /// A validation pass.
    Validation,
    /// Saving a checkpoint (the trainer's `CheckpointSaved`): between steps, in none of them.
    Checkpoint,
    /// The part of a step no phase covers (the trainer's bookkeeping, observers).
    Other,
    /// One whole optimizer step, from its first phase's start to its report.
    Step,
    /// The first optimizer step of a training run, from the run's start to the step's end on
    /// the device: on a GPU backend, mostly kernel compilation and autotuning. Reported on its
    /// own line, and left out of every other row.
    FirstStep,
}

impl Action {
    /// Every action, in step order.
    pub const ALL: [Action; 10] = [
        Action::DataWait,
        Action::HostToDevice,
        Action::Forward,
        Action::Backward,
        Action::Optimizer,
        Action::Validation,
        Action::Checkpoint,
        Action::Other,
        Action::Step,
        Action::FirstStep,
    ];

    /// The snake_case name used in tables, JSON and traces.
    pub fn name(self) -> &'static str {
        match self {
            Action::DataWait => "data_wait",
            Action::HostToDevice => "host_to_device",
            Action::Forward => "forward",
            Action::Backward => "backward",
            Action::Optimizer => "optimizer",
            Action::Validation => "validation",
            Action::Checkpoint => "checkpoint",
            Action::Other => "other",
            Action::Step => "step",
            Action::FirstStep => "first_step",
        }
    }
}

impl From<kiln_ml_core::Phase> for Action {
    fn from(phase: kiln_ml_core::Phase) -> Self {
        match phase {
            kiln_ml_core::Phase::DataWait => Action::DataWait,
            kiln_ml_core::Phase::HostToDevice => Action::HostToDevice,
            kiln_ml_core::Phase::Forward => Action::Forward,
            kiln_ml_core::Phase::Backward => Action::Backward,
            kiln_ml_core::Phase::Optimizer => Action::Optimizer,
            kiln_ml_core::Phase::Validation => Action::Validation,
            // A phase added to kiln-ml-core later is reported with the untimed rest.
            _ => Action::Other,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A timed interval: an action of an optimizer step, placed on the profile's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// What was timed.
    pub action: Action,
    /// The optimizer step it belongs to (validation: the steps done before it).
    pub step: u64,
    /// When it started, as an offset from the profile's [`Clock`](crate::Clock).
    #[serde(with = "crate::serde_seconds")]
    pub start: Duration,
    /// How long it lasted, device sync included.
    #[serde(with = "crate::serde_seconds")]
    pub duration: Duration,
    /// Of `duration`, the device sync the timing added; `None` when the span did not sync.
    #[serde(with = "crate::serde_seconds_option", default)]
    pub sync: Option<Duration>,
}

impl Span {
    /// When it ended, as an offset from the profile's clock.
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}
