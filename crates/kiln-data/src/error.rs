//! The one error type of kiln-data.

use std::path::PathBuf;

use kiln_core::{BlockIndex, FileId};

/// A `Result` whose error is kiln-data's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error from a component kiln-data wraps (an inner block source, a transform).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong while reading Parquet files, caching samples or loading batches.
///
/// Every variant names where it happened: the file, the row group (block), the column, the row
/// or the batch, so the message can be acted on without a debugger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A directory, glob or file list matched no Parquet file.
    #[error("no Parquet files found in {location}")]
    NoParquetFiles {
        /// The directory, glob pattern or list that was searched.
        location: String,
    },
    /// A glob pattern could not be parsed or walked.
    #[error("invalid glob pattern {pattern:?}: {reason}")]
    InvalidGlob {
        /// The pattern.
        pattern: String,
        /// Why it failed.
        reason: String,
    },
    /// An I/O operation on a file or directory failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("opening", "reading", "writing", ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file does not start or end with the Parquet magic bytes.
    #[error("{path} is not a Parquet file: {reason}")]
    NotParquet {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A Parquet file is truncated or its footer, pages or values are corrupt.
    #[error("corrupt Parquet file {path}{}{}: {reason}",
        row_group.map(|g| format!(", row group {g}")).unwrap_or_default(),
        column.as_ref().map(|c| format!(", column {c:?}")).unwrap_or_default())]
    CorruptParquet {
        /// The file.
        path: PathBuf,
        /// The row group, when the failure is inside one.
        row_group: Option<usize>,
        /// The column, when it could be singled out.
        column: Option<String>,
        /// What the reader reported.
        reason: String,
    },
    /// A file's schema differs from the first file's.
    #[error("schema of {path} differs from {reference}: {difference}")]
    SchemaMismatch {
        /// The file whose schema differs.
        path: PathBuf,
        /// The first file, whose schema the others must match.
        reference: PathBuf,
        /// The first difference found.
        difference: String,
    },
    /// A projected column is not in a file.
    #[error("column {column:?} is not in {path} (its columns: {})", available.join(", "))]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The missing column.
        column: String,
        /// The file's top-level columns.
        available: Vec<String>,
    },
    /// The row decoder rejected a row group's values (nulls it does not accept, a wrong type).
    #[error("cannot decode {path}, row group {row_group}{}{}: {reason}",
        column.as_ref().map(|c| format!(", column {c:?}")).unwrap_or_default(),
        row.map(|r| format!(", row {r}")).unwrap_or_default())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The row group.
        row_group: usize,
        /// The column, when the decoder named one.
        column: Option<String>,
        /// The row inside the row group, when the decoder named one.
        row: Option<u64>,
        /// What the decoder reported.
        reason: String,
    },
    /// A file changed (size or modification time) after its footer was read.
    #[error("{path} changed after it was opened ({reason}); reopen the source")]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A block index past the end of the layout.
    #[error("block {block} does not exist: the layout has {blocks} blocks")]
    NoSuchBlock {
        /// The block asked for.
        block: BlockIndex,
        /// How many blocks there are.
        blocks: usize,
    },
    /// A layout or plan was invalid.
    #[error(transparent)]
    Core(#[from] kiln_core::Error),
    /// A sample could not be encoded for the cache.
    #[error("cannot encode sample {row} of block {block} for the cache: {reason}")]
    Encode {
        /// The block.
        block: BlockIndex,
        /// The sample's row inside the block.
        row: u64,
        /// What the codec reported.
        reason: String,
    },
    /// A cache segment failed verification (bad magic, header, length or checksum) or could not
    /// be decoded. Caches report it and rebuild the segment; it is returned only by the
    /// low-level [`DiskCache`](crate::DiskCache) API.
    #[error("corrupt cache segment {path} (block {block}): {reason}")]
    CorruptSegment {
        /// The segment file.
        path: PathBuf,
        /// The block the segment caches.
        block: BlockIndex,
        /// What failed.
        reason: String,
    },
    /// An inner block source failed to read a block.
    #[error("reading {location} failed: {source}")]
    Source {
        /// Where the block lives (the file path and row group when the layout knows them).
        location: String,
        /// The block.
        block: BlockIndex,
        /// The block's file id in the layout.
        file: FileId,
        /// The source's error.
        #[source]
        source: BoxError,
    },
    /// A transform rejected a sample.
    #[error("transform failed on {location}, row {row}: {source}")]
    Transform {
        /// Where the block lives (the file path and row group when the layout knows them).
        location: String,
        /// The block.
        block: BlockIndex,
        /// The block's file id in the layout.
        file: FileId,
        /// The sample's row inside the block.
        row: u64,
        /// The transform's error.
        #[source]
        source: BoxError,
    },
    /// A worker panicked while reading a block or collating a batch.
    #[error("a worker panicked while {task}: {message}")]
    Panicked {
        /// What the worker was doing, with the block, file or batch it was working on.
        task: String,
        /// The panic message.
        message: String,
    },
    /// A plan names samples or blocks that the loader's source does not have.
    #[error("the plan does not fit the source: {reason}")]
    PlanMismatch {
        /// What does not fit.
        reason: String,
    },
    /// A configuration value was impossible.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A loader thread could not be started.
    #[error("cannot start {what}: {source}")]
    Thread {
        /// Which thread.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The loader's background threads stopped before delivering every batch.
    #[error("the loader stopped unexpectedly after {delivered} batches: {reason}")]
    LoaderStopped {
        /// Batches delivered before it stopped.
        delivered: u64,
        /// Why, as far as is known.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// Wraps an inner source's error with the block and file, unless it already is a kiln-data
    /// error (which names its file itself).
    pub(crate) fn from_source<E>(
        location: String,
        block: BlockIndex,
        file: FileId,
        error: E,
    ) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let boxed: BoxError = Box::new(error);
        match boxed.downcast::<Error>() {
            Ok(own) => *own,
            Err(source) => Self::Source {
                location,
                block,
                file,
                source,
            },
        }
    }

    /// The text of a caught panic payload.
    pub(crate) fn panicked(task: String, payload: Box<dyn std::any::Any + Send>) -> Self {
        let message = if let Some(text) = payload.downcast_ref::<&str>() {
            (*text).to_owned()
        } else if let Some(text) = payload.downcast_ref::<String>() {
            text.clone()
        } else {
            "a panic with a non-text payload".to_owned()
        };
        Self::Panicked { task, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_file_row_group_and_column() {
        let error = Error::CorruptParquet {
            path: "data/a.parquet".into(),
            row_group: Some(3),
            column: Some("x".to_owned()),
            reason: "bad page".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "corrupt Parquet file data/a.parquet, row group 3, column \"x\": bad page"
        );
        let error = Error::CorruptParquet {
            path: "a.parquet".into(),
            row_group: None,
            column: None,
            reason: "truncated".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "corrupt Parquet file a.parquet: truncated"
        );
    }

    #[test]
    fn own_errors_are_not_wrapped_twice() {
        let inner = Error::NoSuchBlock {
            block: 4,
            blocks: 2,
        };
        assert!(matches!(
            Error::from_source("block 4 (file 0)".to_owned(), 4, 0, inner),
            Error::NoSuchBlock { .. }
        ));
        let foreign = std::io::Error::other("disk on fire");
        let wrapped = Error::from_source("block 4 (file 1)".to_owned(), 4, 1, foreign);
        assert_eq!(
            wrapped.to_string(),
            "reading block 4 (file 1) failed: disk on fire"
        );
    }

    #[test]
    fn panic_payloads_become_text() {
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let error = Error::panicked("reading block 2".to_owned(), payload);
        assert_eq!(
            error.to_string(),
            "a worker panicked while reading block 2: boom 7"
        );
    }
}
