//! Training events: what the loader and the trainer tell observers.

use std::fmt;
use std::time::Duration;

/// A phase of one training step, timed between [`Event::PhaseStart`] and [`Event::PhaseEnd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Phase {
    /// Waiting for the next batch from the loader.
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
}

impl Phase {
    /// Every phase, in step order.
    pub const ALL: [Phase; 6] = [
        Phase::DataWait,
        Phase::HostToDevice,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Validation,
    ];

    /// A short snake_case name, as used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Phase::DataWait => "data_wait",
            Phase::HostToDevice => "host_to_device",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Validation => "validation",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an optimizer step was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum SkipReason {
    /// The unscaled gradients held `inf` or `NaN` (an f16 overflow): the loss scale backs off.
    NonFiniteGradients,
}

/// Whether an optimizer step changed the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum StepOutcome {
    /// The optimizer updated the parameters (and the LR scheduler advanced).
    Applied,
    /// The step was skipped; parameters and the LR scheduler are unchanged.
    Skipped(SkipReason),
}

/// What one optimizer step did.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepReport {
    /// Optimizer steps attempted so far in the run, this one included.
    pub step: u64,
    /// Applied or skipped.
    pub outcome: StepOutcome,
    /// The unscaled loss, averaged over the step's micro-batches, when this step read it back
    /// to the host (every f16 step; f32 and bf16 steps only when asked to, since a readback
    /// stalls the host until the device has finished the step).
    pub loss: Option<f64>,
    /// The loss scale used for this step, when dynamic loss scaling is on.
    pub loss_scale: Option<f64>,
    /// The global gradient norm before clipping, when it was computed.
    pub grad_norm: Option<f64>,
    /// The learning rate the step used.
    pub learning_rate: f64,
}

impl StepReport {
    /// An applied step `step` at `learning_rate` that read nothing back (no loss, loss scale
    /// or gradient norm): what an f32 or bf16 step between loss readbacks reports. Set the
    /// other fields with struct update syntax.
    ///
    /// ```
    /// use kiln_ml_core::{StepOutcome, StepReport};
    ///
    /// let report = StepReport { loss: Some(0.5), ..StepReport::applied(3, 1e-3) };
    /// assert_eq!(report.outcome, StepOutcome::Applied);
    /// assert_eq!((report.step, report.loss, report.grad_norm), (3, Some(0.5), None));
    /// ```
    pub fn applied(step: u64, learning_rate: f64) -> Self {
        Self {
            step,
            outcome: StepOutcome::Applied,
            loss: None,
            loss_scale: None,
            grad_norm: None,
            learning_rate,
        }
    }
}

/// Something that happened during training or data loading.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Event {
    /// An epoch begins.
    EpochStart {
        /// The epoch, counted from zero.
        epoch: u64,
    },
    /// An epoch's training ends (its last step is done); its end-of-epoch work follows, closed
    /// in a trainer's `fit` by [`Event::EpochClosed`].
    EpochEnd {
        /// The epoch, counted from zero.
        epoch: u64,
        /// Optimizer steps attempted in the epoch.
        steps: u64,
        /// Samples this rank trained on in the epoch.
        samples: u64,
    },
    /// The trainer's `fit` got a batch from its data (the wait for the data iterator). Each
    /// trained batch is reported once, whatever the data is; the loader reports its own side
    /// as [`Event::BatchLoaded`].
    BatchReady {
        /// The epoch, counted from zero.
        epoch: u64,
        /// Index of the batch within the epoch.
        batch: u64,
        /// Samples in the batch.
        samples: u64,
        /// How long the consumer waited for it (zero when it was already prefetched).
        wait: Duration,
    },
    /// kiln-ml-data's loader handed a batch to its consumer (the wait for the workers). An
    /// observer of both the loader and the trainer sees this and [`Event::BatchReady`] for the
    /// same batch, and can tell them apart.
    BatchLoaded {
        /// The epoch, counted from zero.
        epoch: u64,
        /// Index of the batch within the epoch.
        batch: u64,
        /// Samples in the batch.
        samples: u64,
        /// How long the consumer spent in the loader for it: waiting for it (zero when it was
        /// already prefetched), finishing it on the consumer's thread, and for the batch that
        /// launches an announced next epoch, that launch.
        wait: Duration,
    },
    /// A phase of a step begins.
    PhaseStart {
        /// The phase.
        phase: Phase,
        /// The optimizer step the phase belongs to.
        step: u64,
    },
    /// A phase of a step ends.
    PhaseEnd {
        /// The phase.
        phase: Phase,
        /// The optimizer step the phase belongs to.
        step: u64,
        /// Time since the matching start; includes a device sync only when an observer's
        /// [`timing`](crate::Observer::timing) asked for one here.
        elapsed: Duration,
        /// Of `elapsed`, the time the device sync took; `None` when the phase did not sync.
        sync: Option<Duration>,
    },
    /// An optimizer step finished.
    Step(StepReport),
    /// The first optimizer step of a training run (a trainer's `fit`) has finished on the
    /// device, after its [`Event::Step`]. On a GPU backend its time is mostly kernel
    /// compilation and autotuning, so profilers report it apart from the steady steps.
    FirstStep {
        /// The step's number in the run (1, or more after a resume).
        step: u64,
        /// Time from the start of the run (the call of `fit`) to the end of this step, the
        /// device synced.
        elapsed: Duration,
    },
    /// A named figure of the run (a validation metric, for example `valid/min_ade`), logged
    /// by the training code through the trainer; loggers record it and callbacks act on it.
    Metric {
        /// The name, `group/figure` by convention (`valid/min_ade`, `valid/loss`).
        name: String,
        /// The value.
        value: f64,
        /// The epoch it belongs to.
        epoch: u64,
        /// Optimizer steps run when it was logged.
        step: u64,
    },
    /// A checkpoint was written.
    CheckpointSaved {
        /// The file.
        path: std::path::PathBuf,
        /// Optimizer steps the checkpoint holds.
        step: u64,
        /// How long saving it took: reading the state back from the device, encoding it and
        /// the atomic write. Checkpoints are saved between steps, so this time is in no step.
        /// Zero in events recorded before it was measured.
        #[serde(default)]
        elapsed: std::time::Duration,
    },
    /// Everything after an epoch's training is done, in a trainer's `fit`: its end-of-epoch
    /// work (validation and the metrics it logs), the callbacks and the checkpoint the epoch's
    /// end schedules (a run that stops at `max_steps` writes its final checkpoint after this).
    /// Loggers close the epoch's rows here, so they reach the file before the next epoch starts
    /// (or the run is killed). Not sent where `max_steps` cut the epoch short.
    EpochClosed {
        /// The epoch, counted from zero.
        epoch: u64,
    },
}
