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
/// A file already there (a run resumed from a checkpoint into the same directory) is kept: its
/// rows are read when the logger is created, and those at or after the step of the first new
/// row (steps the resumed run replays) are dropped when that row comes. A fresh run into the
/// directory thus replaces the old rows as it goes. `elapsed_s` counts from each logger's
/// start, so it starts again at a resume.
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
    /// `table` holds the rows of a file that was there before: the first new row drops those
    /// at or after its step.
    previous_rows: bool,
    error: Option<Error>,
}

impl CsvLogger {
    /// Logs into `directory/metrics.csv` (the directory is created), a training row every
    /// `every_steps` optimizer steps. The rows of a `metrics.csv` already there are kept up to
    /// where this run's rows begin (see the type's docs); one that does not parse as this
    /// logger's file is an error naming its line.
    pub fn create(directory: impl AsRef<Path>, every_steps: u64) -> Result<Self> {
        let directory = directory.as_ref();
        std::fs::create_dir_all(directory).map_err(|source| Error::LogIo {
            path: directory.to_path_buf(),
            action: "create directory",
            source,
        })?;
        let path = directory.join("metrics.csv");
        let table = read_rows(&path)?;
        let mut state = State {
            rows: LogRows::new(every_steps),
            written: table.len(),
            previous_rows: !table.is_empty(),
            table: Vec::new(),
            columns: BTreeSet::new(),
            error: None,
        };
        for row in table {
            state.columns.extend(row.values.keys().cloned());
            state.table.push(row);
        }
        Ok(Self {
            path,
            state: Mutex::new(state),
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
        if std::mem::take(&mut self.previous_rows) {
            // The steps from here on are this run's: a resumed run replays them.
            self.table.retain(|previous| previous.step < row.step);
            self.columns = self
                .table
                .iter()
                .flat_map(|previous| previous.values.keys().cloned())
                .collect();
            self.written = 0;
        }
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

/// The rows of the CSV file at `path` as [`State::write`] writes them; none when there is no
/// file.
fn read_rows(path: &Path) -> Result<Vec<LogRow>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::LogIo {
                path: path.to_path_buf(),
                action: "read the previous log",
                source,
            });
        }
    };
    let invalid = |line: usize, reason: String| Error::LogIo {
        path: path.to_path_buf(),
        action: "read the previous log",
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "line {line}: {reason} (not a kiln CsvLogger file: move it away or log into another directory)"
            ),
        ),
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Ok(Vec::new());
    };
    let columns: Vec<&str> = header.split(',').collect();
    if columns.get(..3) != Some(&["epoch", "step", "elapsed_s"][..]) {
        return Err(invalid(1, format!("the header is {header:?}")));
    }
    let mut rows = Vec::new();
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != columns.len() {
            return Err(invalid(
                number,
                format!("{} cells under {} columns", cells.len(), columns.len()),
            ));
        }
        let parse = |cell: &str, column: &str| {
            cell.parse::<f64>()
                .map_err(|_| invalid(number, format!("{column} is {cell:?}")))
        };
        let whole = |cell: &str, column: &str| {
            cell.parse::<u64>()
                .map_err(|_| invalid(number, format!("{column} is {cell:?}")))
        };
        let mut row = LogRow {
            epoch: whole(cells[0], "epoch")?,
            step: whole(cells[1], "step")?,
            elapsed_seconds: parse(cells[2], "elapsed_s")?,
            values: Default::default(),
        };
        for (cell, column) in cells.iter().zip(&columns).skip(3) {
            if !cell.is_empty() {
                row.values
                    .insert((*column).to_owned(), parse(cell, column)?);
            }
        }
        rows.push(row);
    }
    Ok(rows)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(epoch: u64, step: u64, values: &[(&str, f64)]) -> LogRow {
        LogRow {
            epoch,
            step,
            elapsed_seconds: step as f64,
            values: values
                .iter()
                .map(|(name, value)| ((*name).to_owned(), *value))
                .collect(),
        }
    }

    fn log(logger: &CsvLogger, rows: Vec<LogRow>) {
        let mut state = logger.state.lock().unwrap();
        for row in rows {
            state.add(row);
        }
    }

    /// A run resumed from its step-2 checkpoint into the same directory keeps the rows logged
    /// up to step 2 and replaces those it replays.
    #[test]
    fn a_resumed_run_keeps_the_rows_before_its_first_step() {
        let dir = tempfile::tempdir().unwrap();
        let first = CsvLogger::create(dir.path(), 1).unwrap();
        log(
            &first,
            vec![
                row(0, 1, &[("train/loss", 2.0)]),
                row(0, 2, &[("train/loss", 1.5)]),
                row(0, 2, &[("valid/min_ade", 0.875)]),
                row(1, 3, &[("train/loss", 1.0), ("train/grad_norm", 4.0)]),
            ],
        );
        first.finish().unwrap();
        drop(first);

        let resumed = CsvLogger::create(dir.path(), 1).unwrap();
        log(&resumed, vec![row(1, 3, &[("train/loss", 1.25)])]);
        resumed.finish().unwrap();
        let text = std::fs::read_to_string(resumed.path()).unwrap();
        assert_eq!(
            text,
            "epoch,step,elapsed_s,train/loss,valid/min_ade\n\
             0,1,1.000,2,\n\
             0,2,2.000,1.5,\n\
             0,2,2.000,,0.875\n\
             1,3,3.000,1.25,\n"
        );
    }

    /// A logger that logs nothing leaves the file it found as it was.
    #[test]
    fn a_logger_that_logs_nothing_leaves_the_previous_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        let before = "epoch,step,elapsed_s,train/loss\n0,1,0.500,2\n";
        std::fs::write(&path, before).unwrap();
        drop(CsvLogger::create(dir.path(), 1).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    }

    #[test]
    fn a_file_that_is_not_this_loggers_is_refused_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        std::fs::write(&path, "step,loss\n1,2\n").unwrap();
        let error = CsvLogger::create(dir.path(), 1).unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
        std::fs::write(
            &path,
            "epoch,step,elapsed_s,train/loss\n0,1,0.5,2\n0,x,1.0,3\n",
        )
        .unwrap();
        let error = CsvLogger::create(dir.path(), 1).unwrap_err().to_string();
        assert!(error.contains("line 3: step is \"x\""), "{error}");
        assert!(error.contains("metrics.csv"), "{error}");
    }
}
