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
/// [`create`](Self::create) starts a new file (one already there is replaced at the first
/// write); [`resume`](Self::resume) goes on with the file of a run resumed from a checkpoint,
/// keeping its rows up to the checkpoint's step. `elapsed_s` counts from each logger's start,
/// so it starts again at a resume. Scalar names holding a comma, a quote or a line break are
/// quoted in the header, as RFC 4180 has it.
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
    /// The first rows of `table` came from the file a resumed run found.
    loaded: usize,
    error: Option<Error>,
}

impl CsvLogger {
    /// Logs into `directory/metrics.csv` (the directory is created), a training row every
    /// `every_steps` optimizer steps. A `metrics.csv` already there is replaced when the first
    /// rows are written.
    pub fn create(directory: impl AsRef<Path>, every_steps: u64) -> Result<Self> {
        Self::with_rows(directory.as_ref(), every_steps, Vec::new(), 0)
    }

    /// Goes on logging into the `directory/metrics.csv` of a run resumed from a checkpoint
    /// taken after `after_step` optimizer steps (`trainer.counters().optimizer_steps` once it
    /// is loaded): the file's rows up to that step are kept, the later ones (steps the resumed
    /// run replays, or whatever the stopped run logged past its checkpoint) are dropped. A kept
    /// row that the resumed run logs again (an epoch's end replayed after a checkpoint taken on
    /// its last step, whose metrics carry that step) is replaced by the new one. A missing file
    /// is started afresh; one that does not parse as this logger's file is an error naming its
    /// line.
    pub fn resume(directory: impl AsRef<Path>, every_steps: u64, after_step: u64) -> Result<Self> {
        let directory = directory.as_ref();
        let mut rows = read_rows(&directory.join(FILE_NAME))?;
        let found = rows.len();
        rows.retain(|row| row.step <= after_step);
        // Rewritten at the first write, or when dropped, when rows were dropped.
        let written = if rows.len() == found { found } else { 0 };
        Self::with_rows(directory, every_steps, rows, written)
    }

    /// A logger whose table starts with `table`, the rows a resumed run found (none for a new
    /// file), `written` of them as the file holds them.
    fn with_rows(
        directory: &Path,
        every_steps: u64,
        table: Vec<LogRow>,
        written: usize,
    ) -> Result<Self> {
        std::fs::create_dir_all(directory).map_err(|source| Error::LogIo {
            path: directory.to_path_buf(),
            action: "create directory",
            source,
        })?;
        let columns = table
            .iter()
            .flat_map(|row| row.values.keys().cloned())
            .collect();
        let loaded = table.len();
        Ok(Self {
            path: directory.join(FILE_NAME),
            state: Mutex::new(State {
                rows: LogRows::new(every_steps),
                table,
                columns,
                written,
                loaded,
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
        if self.loaded > 0 {
            // A row the resumed run logs again replaces the one it found.
            let again = |old: &LogRow| {
                old.epoch == row.epoch
                    && old.step == row.step
                    && old.values.keys().any(|name| row.values.contains_key(name))
            };
            let (found, rest) = self.table.split_at(self.loaded);
            if found.iter().any(again) {
                let mut kept: Vec<LogRow> =
                    found.iter().filter(|old| !again(old)).cloned().collect();
                self.loaded = kept.len();
                kept.extend_from_slice(rest);
                self.table = kept;
                self.written = 0;
            }
        }
        self.columns.extend(row.values.keys().cloned());
        self.table.push(row);
    }

    fn write(&mut self, path: &Path) -> Result<()> {
        let mut text = String::from("epoch,step,elapsed_s");
        for column in &self.columns {
            text.push(',');
            text.push_str(&quoted(column));
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
        // Synced: the log cannot be rebuilt, and an unsynced rename over it could leave the run's
        // whole history empty after a power loss.
        kiln_ml_core::write_atomic(path, text.as_bytes(), kiln_ml_core::Durability::Synced)
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
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let (columns, header_end) = split_header(&text).map_err(|reason| invalid(1, reason))?;
    let header = &text[..header_end];
    if columns.get(..3) != Some(&["epoch", "step", "elapsed_s"].map(String::from)[..]) {
        return Err(invalid(1, format!("the header is {:?}", header.trim_end())));
    }
    // A quoted name may hold line breaks: the header may span lines.
    let header_lines = header.matches('\n').count().max(1);
    let mut rows = Vec::new();
    for (index, line) in text[header_end..].lines().enumerate() {
        let number = header_lines + index + 1;
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

/// The log's file name in its directory.
const FILE_NAME: &str = "metrics.csv";

/// A header field as RFC 4180 writes it: quoted, with its quotes doubled, when it holds a
/// comma, a quote or a line break.
fn quoted(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", name.replace('"', "\"\"")).into()
    } else {
        name.into()
    }
}

/// The fields of the header that starts `text`, written with [`quoted`] names, and the byte
/// offset where the rows begin (after the line break that ends the header outside quotes).
fn split_header(text: &str) -> std::result::Result<(Vec<String>, usize), String> {
    let mut fields = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        let mut field = String::new();
        if chars.peek().map(|&(_, c)| c) == Some('"') {
            chars.next();
            loop {
                match chars.next() {
                    Some((_, '"')) if chars.peek().map(|&(_, c)| c) == Some('"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some((_, '"')) => break,
                    Some((_, c)) => field.push(c),
                    None => return Err("an unterminated quote in the header".to_owned()),
                }
            }
        }
        while let Some(&(_, c)) = chars.peek() {
            if c == ',' || c == '\n' {
                break;
            }
            field.push(c);
            chars.next();
        }
        fields.push(field.strip_suffix('\r').map(str::to_owned).unwrap_or(field));
        match chars.next() {
            Some((_, ',')) => {}
            Some((at, _)) => return Ok((fields, at + 1)),
            None => return Ok((fields, text.len())),
        }
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
    /// up to step 2 and replaces those it replays; a new run starts a new file.
    #[test]
    fn a_resumed_run_keeps_the_rows_up_to_its_checkpoint() {
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

        let resumed = CsvLogger::resume(dir.path(), 1, 2).unwrap();
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

        let fresh = CsvLogger::create(dir.path(), 1).unwrap();
        log(&fresh, vec![row(0, 5, &[("train/loss", 3.0)])]);
        fresh.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(fresh.path()).unwrap(),
            "epoch,step,elapsed_s,train/loss\n0,5,5.000,3\n"
        );
    }

    /// A checkpoint taken on an epoch's last step, before its end: the resumed run runs that
    /// end again and logs its metrics at the same step, which replace the ones found.
    #[test]
    fn metrics_of_a_replayed_epoch_end_replace_the_ones_found() {
        let dir = tempfile::tempdir().unwrap();
        let first = CsvLogger::create(dir.path(), 1).unwrap();
        log(
            &first,
            vec![
                row(0, 100, &[("train/loss", 1.5)]),
                row(0, 100, &[("valid/min_ade", 0.875)]),
                row(1, 150, &[("train/loss", 1.0)]),
            ],
        );
        first.finish().unwrap();
        let resumed = CsvLogger::resume(dir.path(), 1, 100).unwrap();
        log(&resumed, vec![row(0, 100, &[("valid/min_ade", 0.75)])]);
        resumed.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(resumed.path()).unwrap(),
            "epoch,step,elapsed_s,train/loss,valid/min_ade\n\
             0,100,100.000,1.5,\n\
             0,100,100.000,,0.75\n"
        );
    }

    /// Names with commas, quotes or line breaks are quoted in the header and read back whole.
    #[test]
    fn names_with_commas_and_quotes_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let name = "valid/mr@2,0m \"strict\"";
        let broken = "two\nlines";
        let first = CsvLogger::create(dir.path(), 1).unwrap();
        log(
            &first,
            vec![
                row(0, 1, &[(name, 0.25), ("train/loss", 1.0), (broken, 3.0)]),
                row(0, 2, &[("train/loss", 0.5)]),
            ],
        );
        first.finish().unwrap();
        let text = std::fs::read_to_string(first.path()).unwrap();
        assert!(
            text.starts_with(
                "epoch,step,elapsed_s,train/loss,\"two\nlines\",\"valid/mr@2,0m \"\"strict\"\"\"\n"
            ),
            "{text}"
        );
        let resumed = CsvLogger::resume(dir.path(), 1, 2).unwrap();
        let state = resumed.state.lock().unwrap();
        assert_eq!(state.table.len(), 2);
        assert_eq!(state.table[0].values[name], 0.25);
        assert_eq!(state.table[0].values[broken], 3.0);
        assert_eq!(state.table[1].values["train/loss"], 0.5);
    }

    /// A logger that logs nothing leaves the file it found as it was.
    #[test]
    fn a_logger_that_logs_nothing_leaves_the_previous_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        let before = "epoch,step,elapsed_s,train/loss\n0,1,0.500,2\n";
        std::fs::write(&path, before).unwrap();
        drop(CsvLogger::resume(dir.path(), 1, 1).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    }

    #[test]
    fn a_file_that_is_not_this_loggers_is_refused_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.csv");
        std::fs::write(&path, "step,loss\n1,2\n").unwrap();
        let error = CsvLogger::resume(dir.path(), 1, 1).unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
        std::fs::write(
            &path,
            "epoch,step,elapsed_s,train/loss\n0,1,0.5,2\n0,x,1.0,3\n",
        )
        .unwrap();
        let error = CsvLogger::resume(dir.path(), 1, 1).unwrap_err().to_string();
        assert!(error.contains("line 3: step is \"x\""), "{error}");
        assert!(error.contains("metrics.csv"), "{error}");
    }
}
