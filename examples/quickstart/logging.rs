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
    /// Starts both in `dir`, a training row every `every_steps` optimizer steps.
    pub fn create(dir: &Path, every_steps: u64) -> anyhow::Result<Self> {
        Ok(Self {
            csv: Arc::new(CsvLogger::create(dir, every_steps)?),
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
