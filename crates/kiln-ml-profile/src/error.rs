//! kiln-ml-profile's errors.

use std::path::PathBuf;

/// What can go wrong while profiling.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A report, trace or picture could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A report could not be encoded or decoded.
    #[error("{what}: {source}")]
    Json {
        /// What was being encoded or decoded.
        what: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The SVG timeline could not be drawn.
    #[error("cannot draw the timeline {path}: {message}")]
    Draw {
        /// The file.
        path: PathBuf,
        /// The drawing library's message.
        message: String,
    },
    /// A setting is out of its range.
    #[error("invalid {setting}: {message}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A trial or measurement run by a user closure failed with an error that is not out of
    /// memory.
    #[error("{during} failed: {message}")]
    Run {
        /// What was running (`batch-size trial 256`, `the cached-batch run`).
        during: String,
        /// The closure's error or panic message.
        message: String,
    },
    /// Not even the smallest batch size tried fitted.
    #[error("no batch size fits: even {smallest} ran out of memory ({reason})")]
    NothingFits {
        /// The smallest size tried.
        smallest: usize,
        /// Why its trial failed.
        reason: String,
    },
    /// The search used up its trials before any size fitted (a shrink from far above the
    /// limit, say).
    #[error(
        "no batch size fitted in {trials} trials; the smallest tried was {smallest}: start \
         lower or allow more trials"
    )]
    TrialsExhausted {
        /// Trials run.
        trials: usize,
        /// The smallest size tried.
        smallest: usize,
    },
    /// A child process running a trial failed or answered something unreadable.
    #[error("the trial child process for batch size {batch_size} {message}")]
    Child {
        /// The batch size it was trying.
        batch_size: usize,
        /// What went wrong.
        message: String,
    },
}

/// kiln-ml-profile's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<kiln_ml_core::WriteError> for Error {
    /// kiln-ml-core's atomic write failed: the report's path, with the step that failed.
    fn from(error: kiln_ml_core::WriteError) -> Self {
        let kiln_ml_core::WriteError {
            action,
            path,
            source,
        } = error;
        let source = std::io::Error::new(source.kind(), format!("{action}: {source}"));
        Error::Write { path, source }
    }
}
