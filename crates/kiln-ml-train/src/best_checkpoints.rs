//! Keeping the best k checkpoints by a monitored metric (Lightning's `ModelCheckpoint` with
//! `monitor` and `save_top_k`).

use std::path::{Path, PathBuf};

use crate::callback::{Callback, CheckpointWriter, Decision, EpochContext, Mode};
use crate::{Error, Result};

/// After each epoch, writes a checkpoint into its own directory when the epoch's `monitor` is
/// among the `keep` best so far, and deletes the one it pushes out. The ranking lives in the
/// file names (`best-epoch-E-step-S.kiln`, with the value in a `.value` file beside), so a
/// resumed run goes on ranking against the files already there. A checkpoint whose value file
/// is missing (a crash between the two writes) is left alone and not ranked. An epoch whose
/// metric is NaN or infinite (a diverged loss) is never kept. In a data-parallel group only the
/// replica that writes checkpoints (rank 0) touches the directory.
///
/// ```
/// use kiln_ml_train::{BestCheckpoints, Mode};
///
/// let dir = std::env::temp_dir().join("kiln-best-doc");
/// let best = BestCheckpoints::new(&dir, "valid/min_ade", Mode::Min, 3);
/// assert!(best.ranked().unwrap().is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct BestCheckpoints {
    directory: PathBuf,
    monitor: String,
    mode: Mode,
    keep: usize,
}

/// One kept checkpoint: its file and the monitored value it was saved with.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedCheckpoint {
    /// The checkpoint file.
    pub path: PathBuf,
    /// The monitored value.
    pub value: f64,
}

const PREFIX: &str = "best-";
const EXTENSION: &str = "kiln";
const VALUE_EXTENSION: &str = "value";

impl BestCheckpoints {
    /// Keeps the `keep` best checkpoints by `monitor` in `directory` (created when needed).
    pub fn new(
        directory: impl Into<PathBuf>,
        monitor: impl Into<String>,
        mode: Mode,
        keep: usize,
    ) -> Self {
        Self {
            directory: directory.into(),
            monitor: monitor.into(),
            mode,
            keep,
        }
    }

    /// The kept checkpoints, best first.
    pub fn ranked(&self) -> Result<Vec<RankedCheckpoint>> {
        let entries = match std::fs::read_dir(&self.directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io_error(&self.directory, "list", source)),
        };
        let mut ranked = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|source| io_error(&self.directory, "list", source))?
                .path();
            let is_best = path.extension().is_some_and(|ext| ext == EXTENSION)
                && path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with(PREFIX));
            if !is_best {
                continue;
            }
            let value_path = path.with_extension(VALUE_EXTENSION);
            let text = match std::fs::read_to_string(&value_path) {
                Ok(text) => text,
                // Written last: without it the checkpoint was never ranked.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(io_error(&value_path, "read", source)),
            };
            let value = text
                .trim()
                .parse::<f64>()
                .map_err(|_| Error::CheckpointFormat {
                    path: value_path.clone(),
                    reason: format!("holds {:?}, not a number", text.trim()),
                })?;
            ranked.push(RankedCheckpoint { path, value });
        }
        ranked.sort_by(|a, b| {
            let order = a.value.total_cmp(&b.value);
            match self.mode {
                Mode::Min => order,
                Mode::Max => order.reverse(),
            }
        });
        Ok(ranked)
    }

    /// The best checkpoint so far, if any.
    pub fn best(&self) -> Result<Option<RankedCheckpoint>> {
        Ok(self.ranked()?.into_iter().next())
    }

    /// Whether `value` enters the best `keep` of `ranked`. A value that is not finite never
    /// does: an infinite loss is a diverged model (as `EarlyStopping` decides), not the best
    /// one, and it would outrank every later value.
    fn qualifies(&self, value: f64, ranked: &[RankedCheckpoint]) -> bool {
        if !value.is_finite() || self.keep == 0 {
            return false;
        }
        ranked.len() < self.keep
            || ranked
                .get(self.keep - 1)
                .is_some_and(|worst| self.mode.improves(value, worst.value, 0.0))
    }
}

impl Callback for BestCheckpoints {
    /// Run after the other callbacks, so its checkpoints hold their states of the same epoch.
    fn keeps_checkpoints(&self) -> bool {
        true
    }

    fn on_epoch_end(
        &mut self,
        context: &EpochContext<'_>,
        checkpoints: &dyn CheckpointWriter,
    ) -> Result<Decision> {
        let epoch = context.summary.epoch;
        // Only the replica that writes checkpoints (rank 0) needs the metric: the others may
        // validate nothing.
        if !checkpoints.writes_checkpoints() {
            return Ok(Decision::CONTINUE);
        }
        let value = context
            .metrics
            .require(&self.monitor, "BestCheckpoints", epoch)?;
        let ranked = self.ranked()?;
        if !self.qualifies(value, &ranked) {
            return Ok(Decision::CONTINUE);
        }
        let path = self.directory.join(format!(
            "{PREFIX}epoch-{epoch}-step-{}.{EXTENSION}",
            context.step
        ));
        checkpoints.write_checkpoint(&path)?;
        // The value file last: a checkpoint without one is not ranked (nor lost: it is there).
        let value_path = path.with_extension(VALUE_EXTENSION);
        kiln_ml_core::write_atomic(
            &value_path,
            format!("{value:e}\n").as_bytes(),
            kiln_ml_core::Durability::Synced,
        )
        .map_err(|error| io_error(&error.path, error.action, error.source))?;
        // The checkpoint first: a crash in between leaves a stray value file, never an
        // unranked checkpoint that no later epoch would push out.
        for pushed_out in self.ranked()?.iter().skip(self.keep) {
            remove(&pushed_out.path)?;
            remove(&pushed_out.path.with_extension(VALUE_EXTENSION))?;
        }
        Ok(Decision::CONTINUE)
    }
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(io_error(path, "remove", source)),
    }
}

fn io_error(path: &Path, action: &'static str, source: std::io::Error) -> Error {
    Error::CheckpointIo {
        path: path.to_path_buf(),
        action,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EpochSummary;
    use crate::callback::EpochMetrics;

    /// Writes an empty file as the checkpoint, or nothing when it is not the writing replica.
    struct FileWriter {
        writes: bool,
    }

    impl CheckpointWriter for FileWriter {
        fn write_checkpoint(&self, path: &Path) -> Result<()> {
            if self.writes {
                std::fs::write(path, b"checkpoint").unwrap();
            }
            Ok(())
        }

        fn writes_checkpoints(&self) -> bool {
            self.writes
        }
    }

    fn epoch_end(best: &mut BestCheckpoints, epoch: u64, value: f64, writes: bool) {
        let mut metrics = EpochMetrics::default();
        metrics.insert("m", value);
        let summary = EpochSummary {
            epoch,
            ..EpochSummary::default()
        };
        let context = EpochContext::new(&summary, &metrics, 10 * (epoch + 1))
            .on_rank(if writes { 0 } else { 1 }, 2);
        best.on_epoch_end(&context, &FileWriter { writes }).unwrap();
    }

    #[test]
    fn a_replica_that_writes_no_checkpoints_leaves_the_directory_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut best = BestCheckpoints::new(dir.path(), "m", Mode::Min, 1);
        epoch_end(&mut best, 0, 1.0, false);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        epoch_end(&mut best, 0, 1.0, true);
        // Another replica's epoch end neither ranks nor prunes what rank 0 keeps.
        epoch_end(&mut best, 1, 0.5, false);
        assert_eq!(best.ranked().unwrap().len(), 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// A diverged epoch (an infinite loss, or NaN) is not kept, whichever way the metric is
    /// ranked, and the finite best stays.
    #[test]
    fn values_that_are_not_finite_are_never_kept() {
        for (mode, bad) in [
            (Mode::Min, f64::NEG_INFINITY),
            (Mode::Max, f64::INFINITY),
            (Mode::Min, f64::NAN),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut best = BestCheckpoints::new(dir.path(), "m", mode, 1);
            epoch_end(&mut best, 0, 1.0, true);
            epoch_end(&mut best, 1, bad, true);
            let ranked = best.ranked().unwrap();
            assert_eq!(ranked.len(), 1, "{mode:?} {bad}");
            assert_eq!(ranked[0].value, 1.0, "{mode:?} {bad}");
            assert!(
                ranked[0].path.ends_with("best-epoch-0-step-10.kiln"),
                "{mode:?} {bad}"
            );
        }
    }

    #[test]
    fn a_checkpoint_without_its_value_file_is_not_ranked_and_does_not_stop_training() {
        let dir = tempfile::tempdir().unwrap();
        let mut best = BestCheckpoints::new(dir.path(), "m", Mode::Min, 1);
        // A crash between the checkpoint and its value file.
        std::fs::write(dir.path().join("best-epoch-0-step-10.kiln"), b"checkpoint").unwrap();
        assert!(best.ranked().unwrap().is_empty());
        epoch_end(&mut best, 1, 0.5, true);
        let ranked = best.ranked().unwrap();
        assert_eq!(ranked.len(), 1);
        assert!(ranked[0].path.ends_with("best-epoch-1-step-20.kiln"));
        assert!(
            dir.path().join("best-epoch-0-step-10.kiln").exists(),
            "left alone"
        );
    }
}
