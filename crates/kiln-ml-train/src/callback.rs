//! Callbacks that act: after each epoch they read its metrics and can stop training or write
//! checkpoints (Lightning's `Callback`, `EarlyStopping`, `ModelCheckpoint`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::{EpochSummary, Error, Result};

/// Whether smaller or larger values of a monitored metric are better (Lightning's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Smaller is better (a loss, an error such as minADE).
    Min,
    /// Larger is better (an accuracy, a mAP).
    Max,
}

impl Mode {
    /// Whether `value` improves on `best` by more than `min_delta`.
    pub fn improves(self, value: f64, best: f64, min_delta: f64) -> bool {
        match self {
            Mode::Min => value < best - min_delta,
            Mode::Max => value > best + min_delta,
        }
    }
}

/// The metrics logged during one epoch with [`Trainer::log_metric`](crate::Trainer::log_metric),
/// by name (the last value of a name wins).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochMetrics {
    epoch: u64,
    values: BTreeMap<String, f64>,
}

impl EpochMetrics {
    /// Records `value` under `name`.
    pub(crate) fn insert(&mut self, name: &str, value: f64) {
        self.values.insert(name.to_owned(), value);
    }

    /// Forgets every metric: `epoch` starts.
    pub(crate) fn start(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.values.clear();
    }

    /// The epoch these metrics belong to (the one that ends in `fit_with`'s end-of-epoch
    /// closure, though the trainer already counts the next).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The value logged under `name`, if any.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied()
    }

    /// Every metric, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.values
            .iter()
            .map(|(name, value)| (name.as_str(), *value))
    }

    /// The value of `name` for callback `callback`, or [`Error::MissingMetric`] listing what
    /// the epoch did log.
    pub fn require(&self, name: &str, callback: &'static str, epoch: u64) -> Result<f64> {
        self.get(name).ok_or_else(|| {
            let logged: Vec<&str> = self.values.keys().map(String::as_str).collect();
            Error::MissingMetric {
                callback,
                metric: name.to_owned(),
                epoch,
                logged: if logged.is_empty() {
                    "none".to_owned()
                } else {
                    logged.join(", ")
                },
            }
        })
    }
}

/// What a callback sees at the end of an epoch.
///
/// Fields may be added in later versions: outside kiln, build one with
/// [`new`](Self::new) (a callback's unit test does).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EpochContext<'a> {
    /// What the epoch did.
    pub summary: &'a EpochSummary,
    /// What the epoch logged.
    pub metrics: &'a EpochMetrics,
    /// Optimizer steps run so far in the run.
    pub step: u64,
    /// This trainer's rank in a data-parallel run, from zero; 0 for a single trainer.
    pub rank: u32,
    /// The number of replicas in a data-parallel run; 1 for a single trainer.
    pub world: u32,
}

impl<'a> EpochContext<'a> {
    /// The context of a single trainer (rank 0 of 1) after `step` optimizer steps.
    pub fn new(summary: &'a EpochSummary, metrics: &'a EpochMetrics, step: u64) -> Self {
        Self {
            summary,
            metrics,
            step,
            rank: 0,
            world: 1,
        }
    }

    /// This context as replica `rank` of `world` sees it.
    ///
    /// # Panics
    /// When `rank` is not below `world`.
    pub fn on_rank(self, rank: u32, world: u32) -> Self {
        assert!(rank < world, "rank {rank} of a world of {world}");
        Self {
            rank,
            world,
            ..self
        }
    }

    /// Whether this is a single trainer or rank 0 of a data-parallel run: the replica that
    /// writes checkpoints, and the one that usually validates. `fit` gives every replica the
    /// callbacks' decisions of all replicas, so a callback on another rank may decide nothing.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }
}

/// What a callback asks of the trainer after an epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decision {
    /// Stop training after this epoch (its checkpoint is still written).
    pub stop: bool,
    /// Write the trainer's checkpoint now (into
    /// [`TrainerConfig::checkpoint`](crate::TrainerConfig::checkpoint)'s directory, as a
    /// scheduled one), whatever the schedule says.
    pub checkpoint: bool,
    /// Training diverged (a NaN or infinite metric): stop, and write no checkpoint after this
    /// epoch, whatever `checkpoint`, another callback or the schedule says, so that pruning
    /// keeps the last good ones rather than making room for diverged weights.
    pub diverged: bool,
}

impl Decision {
    /// Go on training.
    pub const CONTINUE: Decision = Decision {
        stop: false,
        checkpoint: false,
        diverged: false,
    };
    /// Stop after this epoch.
    pub const STOP: Decision = Decision {
        stop: true,
        checkpoint: false,
        diverged: false,
    };
    /// Write the trainer's checkpoint now and go on.
    pub const CHECKPOINT: Decision = Decision {
        stop: false,
        checkpoint: true,
        diverged: false,
    };
    /// Stop now without writing a checkpoint: training diverged.
    pub const DIVERGED: Decision = Decision {
        stop: true,
        checkpoint: false,
        diverged: true,
    };
}

/// Writes the whole run to a file: what the trainer lends a callback that keeps checkpoints of
/// its own ([`BestCheckpoints`](crate::BestCheckpoints)).
pub trait CheckpointWriter {
    /// Writes a checkpoint of the run to `path` atomically, as
    /// [`Trainer::save_checkpoint`](crate::Trainer::save_checkpoint) does. Does nothing where
    /// [`writes_checkpoints`](Self::writes_checkpoints) is false.
    fn write_checkpoint(&self, path: &Path) -> Result<()>;

    /// Whether this trainer writes checkpoints: a single trainer, or rank 0 of a data-parallel
    /// group. A callback that keeps files of its own beside the checkpoints does its file work
    /// only where this is true, so replicas sharing a directory do not race each other.
    fn writes_checkpoints(&self) -> bool {
        true
    }
}

/// A callback run by [`Trainer::fit_with`](crate::Trainer::fit_with) after each epoch (after
/// its end-of-epoch closure, so it sees the metrics the closure logged, and before the epoch's
/// checkpoint). Register with [`Trainer::add_callback`](crate::Trainer::add_callback).
///
/// A callback with state that a resumed run must continue from (a count of epochs, a best
/// value) saves it in the trainer's checkpoints, as Lightning's `state_dict`: it names itself
/// with [`state_key`](Self::state_key), unique among the trainer's callbacks, returns its state
/// from [`state`](Self::state) and takes it back in [`load_state`](Self::load_state). The
/// trainer asks for the state after each of the callback's epoch ends, and gives a loaded
/// checkpoint's state back when `fit` starts. Callbacks run in the order added, except that
/// those which write checkpoints of their own ([`keeps_checkpoints`](Self::keeps_checkpoints),
/// as [`BestCheckpoints`](crate::BestCheckpoints)) run after all the others, as Lightning moves
/// its `ModelCheckpoint` callbacks last: their checkpoints hold every callback's state of the
/// same epoch, whatever the order they were added in.
///
/// ```
/// use kiln_ml_train::{Callback, CheckpointWriter, Decision, EpochContext};
///
/// /// Stops once the validation loss is under a target.
/// struct StopBelow(f64);
///
/// impl Callback for StopBelow {
///     fn on_epoch_end(
///         &mut self,
///         context: &EpochContext<'_>,
///         _checkpoints: &dyn CheckpointWriter,
///     ) -> kiln_ml_train::Result<Decision> {
///         let loss = context.metrics.require("valid/loss", "StopBelow", context.summary.epoch)?;
///         Ok(if loss < self.0 { Decision::STOP } else { Decision::CONTINUE })
///     }
/// }
/// # let _ = StopBelow(0.1);
/// ```
pub trait Callback: Send {
    /// Acts on the epoch that just ended.
    fn on_epoch_end(
        &mut self,
        context: &EpochContext<'_>,
        checkpoints: &dyn CheckpointWriter,
    ) -> Result<Decision>;

    /// Whether this callback writes checkpoints of its own through the [`CheckpointWriter`]
    /// (`false` by default). The trainer runs such callbacks after all the others, so the
    /// checkpoints they write hold the other callbacks' states of the epoch that just ended.
    fn keeps_checkpoints(&self) -> bool {
        false
    }

    /// The name this callback's state is saved under in checkpoints (Lightning's
    /// `state_key`: the type and what tells two instances apart); `None`, the default, for a
    /// callback with nothing to resume. Two callbacks of one trainer with the same key make
    /// `fit` fail with [`Error::DuplicateCallbackState`].
    fn state_key(&self) -> Option<String> {
        None
    }

    /// The state to save in checkpoints, as JSON. Save floats that must come back exactly as
    /// text (`value.to_string()`, read with `parse::<f64>()`): JSON has no NaN or infinities
    /// (serde_json writes them as `null`), and its numbers are not read back bit for bit.
    fn state(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Continues from `state`, which [`state`](Self::state) returned in the run that wrote
    /// the checkpoint. On an `Err` (saying what is wrong), `fit` fails with
    /// [`Error::CheckpointFormat`] naming the file and the callback.
    fn load_state(&mut self, state: &serde_json::Value) -> std::result::Result<(), String> {
        let _ = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_compare_with_a_margin() {
        assert!(Mode::Min.improves(0.9, 1.0, 0.05));
        assert!(!Mode::Min.improves(0.96, 1.0, 0.05));
        assert!(Mode::Max.improves(1.1, 1.0, 0.05));
        assert!(!Mode::Max.improves(1.0, 1.0, 0.0));
    }

    #[test]
    fn a_missing_metric_names_what_was_logged() {
        let mut metrics = EpochMetrics::default();
        metrics.insert("valid/loss", 0.5);
        let error = metrics
            .require("valid/min_ade", "EarlyStopping", 3)
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`valid/min_ade`"), "{message}");
        assert!(message.contains("epoch 3"), "{message}");
        assert!(message.contains("valid/loss"), "{message}");
    }
}
