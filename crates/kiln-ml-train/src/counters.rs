//! Run counters: how far training has come, saved in checkpoints.

/// How far a run has come. Saved in checkpoints, so a resumed run continues the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Optimizer steps attempted (applied plus skipped).
    pub optimizer_steps: u64,
    /// Optimizer steps that updated the parameters (and advanced the LR scheduler).
    pub applied_steps: u64,
    /// Optimizer steps skipped for inf/NaN gradients.
    pub skipped_steps: u64,
    /// Micro-batches trained on.
    pub micro_batches: u64,
    /// Samples trained on by this rank, as the data reported them (through `fit` or
    /// [`Trainer::record_position`](crate::Trainer::record_position)).
    pub samples: u64,
    /// Optimizer steps attempted in the current epoch.
    pub epoch_steps: u64,
    /// Micro-batches trained on in the current epoch.
    pub epoch_batches: u64,
    /// Samples trained on in the current epoch (counted like [`samples`](Self::samples)).
    #[serde(default)]
    pub epoch_samples: u64,
    /// Device-to-host readbacks the trainer made (each one stalls the host until the device has
    /// caught up): one per f16 optimizer step, none per f32 or bf16 step with the default
    /// settings. Phase-timing syncs and checkpoints (which read the whole model) are not
    /// counted.
    #[serde(default)]
    pub readbacks: u64,
    /// Waits of the run-ahead bound
    /// ([`max_queued_steps`](crate::TrainerConfig::max_queued_steps)): the host waited for a
    /// step queued earlier to finish, while the later ones stayed queued (the device's queue is
    /// not drained; nothing is copied but that step's loss).
    #[serde(default)]
    pub lagged_waits: u64,
}

/// What one call of [`Trainer::train_batch`](crate::Trainer::train_batch) did.
#[derive(Debug, Clone)]
pub struct BatchOutcome<O> {
    /// What the step function handed back.
    pub output: O,
    /// The optimizer step this micro-batch completed, if it was the last of a window.
    pub step: Option<kiln_ml_core::StepReport>,
}

/// What [`Trainer::fit`](crate::Trainer::fit) did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitSummary {
    /// The counters when `fit` returned.
    pub counters: Counters,
    /// Where the data stands: the next epoch and samples consumed in it.
    pub position: kiln_ml_core::Position,
    /// The loss of the last optimizer step, if any ran.
    pub last_loss: Option<f64>,
    /// Whether `fit` stopped at [`max_steps`](crate::TrainerConfig::max_steps).
    pub reached_max_steps: bool,
    /// The epoch after which a [`Callback`](crate::Callback) (such as
    /// [`EarlyStopping`](crate::EarlyStopping)) stopped training, if one did.
    pub stopped_early: Option<u64>,
    /// Time from the call of `fit` to the end of its first optimizer step (the device synced),
    /// when one ran: on a GPU backend, mostly kernel compilation and autotuning.
    pub time_to_first_step: Option<std::time::Duration>,
}
