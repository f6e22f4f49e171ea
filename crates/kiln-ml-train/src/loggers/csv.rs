//! A CSV file of the run's scalars: one row per logged step or epoch, one column per scalar.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kiln_ml_core::{Event, Observer};

use super::rows::{LogRow, LogRows};
use crate::{Error, Result};

/// Writes `DIR/metrics.csv`: a header (`epoch,step,elapsed_s` and every scalar name seen, in
/// order) and a row per logged step or epoch, empty where a row lacks a scalar. The file is
/// rewritten atomically at each epoch's end, after logged metrics, by [`finish`](Self::finish)
/// and when the logger is dropped with rows not yet written (a failed run keeps them), so it is
/// always whole (Lightning's `CSVLogger` rewrites it too when new names appear).
///
/// ```no_run
/// use kiln_ml_train::CsvLogger;
///
/// let logger = std::sync::Arc::new(CsvLogger::create("runs/1", 50)?);
/// // trainer.add_observer(Arc::clone(&logger)); ... fit ...
/// logger.finish()?;
/// # Ok::<(), kiln_ml_train::Error>(())
/// ```
#[derive(Debug)]
pub struct CsvLogger {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    rows: LogRows,
    table: Vec<LogRow>,
    columns: BTreeSet<String>,
    /// Rows of `table` in the file as last written.
    written: usize,
    error: Option<Error>,
}

impl CsvLogger {
    /// Logs into `directory/metrics.csv` (the directory is created), a training row every
    /// `every_steps` optimizer steps.
    pub fn create(directory: impl AsRef<Path>, every_steps: u64) -> Result<Self> {
        let directory = directory.as_ref();
        std::fs::create_dir_all(directory).map_err(|source| Error::LogIo {
            path: directory.to_path_buf(),
            action: "create directory",
            source,
        })?;
        Ok(Self {
            path: directory.join("metrics.csv"),
            state: Mutex::new(State {
                rows: LogRows::new(every_steps),
                table: Vec::new(),
                columns: BTreeSet::new(),
                written: 0,
                error: None,
            }),
        })
    }

    /// The CSV file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what is pending and returns the first write error of the run, if any.
    pub fn finish(&self) -> Result<()> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(row) = state.rows.flush() {
            state.add(row);
        }
        let written = state.write(&self.path);
        match state.error.take() {
            Some(error) => Err(error),
            None => written,
        }
    }
}

impl State {
    fn add(&mut self, row: LogRow) {
        self.columns.extend(row.values.keys().cloned());
        self.table.push(row);
    }

    fn write(&mut self, path: &Path) -> Result<()> {
        let mut text = String::from("epoch,step,elapsed_s");
        for column in &self.columns {
            text.push(',');
            text.push_str(column);
        }
        text.push('\n');
        for row in &self.table {
            let _ = write!(
                text,
                "{},{},{:.3}",
                row.epoch, row.step, row.elapsed_seconds
            );
            for column in &self.columns {
                text.push(',');
                if let Some(value) = row.values.get(column) {
                    let _ = write!(text, "{value}");
                }
            }
            text.push('\n');
        }
        kiln_ml_core::write_atomic(path, text.as_bytes(), kiln_ml_core::Durability::Renamed)
            .map_err(|error| Error::LogIo {
                path: error.path,
                action: error.action,
                source: error.source,
            })?;
        self.written = self.table.len();
        Ok(())
    }
}

/// A run that ended without [`finish`](CsvLogger::finish) (an error, a panic) keeps the rows
/// it logged.
impl Drop for CsvLogger {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(|poison| poison.into_inner());
        let unwritten = state.rows.has_pending() || state.table.len() > state.written;
        if unwritten
            && state.error.is_none()
            && let Err(error) = self.finish()
        {
            eprintln!("warning: {error}; the CSV log's last rows are lost");
        }
    }
}

impl Observer for CsvLogger {
    fn on_event(&self, event: &Event) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let rows = state.rows.on_event(event);
        let metrics_logged = rows.iter().any(|row| !row.values.contains_key("train/lr"));
        for row in rows {
            state.add(row);
        }
        let due = metrics_logged || matches!(event, Event::EpochEnd { .. });
        if due
            && state.error.is_none()
            && let Err(error) = state.write(&self.path)
        {
            eprintln!("warning: {error}; the CSV log stops here");
            state.error = Some(error);
        }
    }
}
