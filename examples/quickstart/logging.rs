//! `--log-dir`: the run's scalars as `metrics.csv` and a TensorBoard event file.

use std::path::Path;
use std::sync::Arc;

use kiln_ml::train::{CsvLogger, TensorBoardLogger};

/// Both loggers of one run, writing into one directory.
pub struct RunLogs {
    pub csv: Arc<CsvLogger>,
    pub tensorboard: Arc<TensorBoardLogger>,
}

impl RunLogs {
    /// Starts both in `dir`, a training row every `every_steps` optimizer steps; a run resumed
    /// from a checkpoint after `resumed_after` optimizer steps keeps the CSV's rows up to it.
    pub fn create(
        dir: &Path,
        every_steps: u64,
        resumed_after: Option<u64>,
    ) -> anyhow::Result<Self> {
        let csv = match resumed_after {
            Some(step) => CsvLogger::resume(dir, every_steps, step)?,
            None => CsvLogger::create(dir, every_steps)?,
        };
        Ok(Self {
            csv: Arc::new(csv),
            tensorboard: Arc::new(TensorBoardLogger::create(dir, every_steps)?),
        })
    }

    /// Writes what is pending; prints where the logs are.
    pub fn finish(&self) -> anyhow::Result<()> {
        self.csv.finish()?;
        self.tensorboard.finish()?;
        println!(
            "logs      {} and {} (tensorboard --logdir {})",
            self.csv.path().display(),
            self.tensorboard.path().display(),
            self.tensorboard
                .path()
                .parent()
                .unwrap_or(Path::new("."))
                .display()
        );
        Ok(())
    }
}
