//! TensorBoard event files of the run's scalars.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_ml_core::{Event, Observer};

use super::rows::{LogRow, LogRows};
use super::tfrecord::{file_version_event, record, scalars_event};
use crate::{Error, Result};

/// Writes a TensorBoard event file (`DIR/events.out.tfevents.SECONDS.kiln.PID.N`, N counting
/// this process's loggers, so two never share a file) with the scalars
/// of [`LogRows`]: `train/loss`, `train/lr`, throughput, phase times every N steps, and the
/// metrics logged with `Trainer::log_metric` (`valid/min_ade`). Open `DIR` with
/// `tensorboard --logdir`. Records are appended and flushed at each epoch's end and by
/// [`finish`](Self::finish), and when the logger is dropped (a failed run keeps its rows);
/// [`read_scalars`](crate::read_scalars) reads them back.
///
/// ```no_run
/// use kiln_ml_train::TensorBoardLogger;
///
/// let logger = std::sync::Arc::new(TensorBoardLogger::create("runs/1", 50)?);
/// // trainer.add_observer(Arc::clone(&logger)); ... fit ...
/// logger.finish()?;
/// # Ok::<(), kiln_ml_train::Error>(())
/// ```
#[derive(Debug)]
pub struct TensorBoardLogger {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    rows: LogRows,
    file: BufWriter<File>,
    error: Option<Error>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

impl TensorBoardLogger {
    /// Starts a new event file in `directory` (created when needed), a training row every
    /// `every_steps` optimizer steps.
    pub fn create(directory: impl AsRef<Path>, every_steps: u64) -> Result<Self> {
        let directory = directory.as_ref();
        let io = |path: &Path, action| {
            let path = path.to_path_buf();
            move |source| Error::LogIo {
                path,
                action,
                source,
            }
        };
        std::fs::create_dir_all(directory).map_err(io(directory, "create directory"))?;
        let started = now();
        // Unique per process and logger, like TensorFlow's own names: two loggers started in the
        // same second (ranks, a range test then the run) would otherwise share one file.
        static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = directory.join(format!(
            "events.out.tfevents.{}.kiln.{}.{serial}",
            started as u64,
            std::process::id()
        ));
        let created = File::create_new(&path).map_err(io(&path, "create"))?;
        let mut file = BufWriter::new(created);
        file.write_all(&record(&file_version_event(started)))
            .and_then(|()| file.flush())
            .map_err(io(&path, "write"))?;
        Ok(Self {
            path,
            state: Mutex::new(State {
                rows: LogRows::new(every_steps),
                file,
                error: None,
            }),
        })
    }

    /// The event file.
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
            state.append(&row, &self.path);
        }
        state.flush(&self.path);
        state.error.take().map_or(Ok(()), Err)
    }
}

impl State {
    fn append(&mut self, row: &LogRow, path: &Path) {
        let values = row.values.iter().map(|(tag, value)| (tag.as_str(), *value));
        let bytes = record(&scalars_event(now(), row.step, values));
        let written = self.file.write_all(&bytes);
        self.note(written, path);
    }

    fn flush(&mut self, path: &Path) {
        let flushed = self.file.flush();
        self.note(flushed, path);
    }

    fn note(&mut self, result: std::io::Result<()>, path: &Path) {
        if let Err(source) = result
            && self.error.is_none()
        {
            let error = Error::LogIo {
                path: path.to_path_buf(),
                action: "write",
                source,
            };
            eprintln!("warning: {error}");
            self.error = Some(error);
        }
    }
}

/// A run that ended without [`finish`](TensorBoardLogger::finish) (an error, a panic) keeps
/// its last rows.
impl Drop for TensorBoardLogger {
    fn drop(&mut self) {
        // A write error was printed when it happened.
        let _ = self.finish();
    }
}

impl Observer for TensorBoardLogger {
    fn on_event(&self, event: &Event) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let rows = state.rows.on_event(event);
        // As the CSV logger: an epoch's metrics reach the file as soon as their row is
        // complete (at the next event: the epoch's checkpoint, or `EpochClosed`), not at the
        // next epoch's end.
        let metrics_logged = rows.iter().any(|row| !row.values.contains_key("train/lr"));
        for row in rows {
            state.append(&row, &self.path);
        }
        if metrics_logged || matches!(event, Event::EpochEnd { .. }) {
            state.flush(&self.path);
        }
    }
}
