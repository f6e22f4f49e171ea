//! The one error type of kiln-ml-data.

use std::path::PathBuf;

use kiln_ml_core::{BlockIndex, BoxError, FileId, ReadError};

/// A `Result` whose error is kiln-ml-data's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while reading Parquet files or loading batches, or in a kiln-ml-cache stacked
/// between the two ([`Error::Cache`]).
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
    /// Reading a block failed in a way every block source can fail (kiln-ml-core's shared
    /// vocabulary, the same with or without a cache in between): I/O on a file or directory, a
    /// block past the end of the layout, an inner source's error, a worker's panic.
    #[error(transparent)]
    Read(#[from] ReadError),
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
    /// A column chunk is compressed with a codec this build cannot decompress: refused when
    /// the source is built, not at the chunk's first read.
    #[error(
        "cannot read {path}, row group {row_group}, column {column:?}: its {codec} compression is not available in this build; {remedy}"
    )]
    UnsupportedCodec {
        /// The file.
        path: PathBuf,
        /// The first row group using the codec.
        row_group: usize,
        /// The column.
        column: String,
        /// The codec, as the Parquet format names it (`ZSTD`, `LZO`).
        codec: &'static str,
        /// What to do about it (the kiln-ml-data feature to turn on).
        remedy: &'static str,
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
    /// Hive partition directories that cannot become columns: a key twice in one path, a key
    /// that is also a column of the file, or one file reached under two partition paths.
    #[error("cannot read the partition directories of {path}: {reason}")]
    Partition {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A name given to more than one top-level column of a file: columns are matched by name,
    /// so which one is meant cannot be told.
    #[error("column {column:?} appears {count} times in {path}; columns are matched by name")]
    DuplicateColumn {
        /// The file.
        path: PathBuf,
        /// The repeated name.
        column: String,
        /// How many columns have it.
        count: usize,
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
    /// A file changed (size, modification time, footer bytes or, for an object, entity tag)
    /// after its footer was read.
    #[error("{path} changed after it was opened ({reason}); reopen the source")]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// An object store (S3, GCS, Azure, HTTP) failed to list, read or answer for an object,
    /// after the retries of the source's [`RetryPolicy`](crate::RetryPolicy) when the failure
    /// looked transient.
    #[error("{url}{}: {action} failed after {attempts} attempt{}: {reason}",
        row_group.map(|g| format!(", row group {g}")).unwrap_or_default(),
        if *attempts == 1 { "" } else { "s" })]
    Remote {
        /// The object (or the prefix listed).
        url: String,
        /// The row group being read, if any.
        row_group: Option<usize>,
        /// What was being done ("listing", "reading the footer of", "reading").
        action: &'static str,
        /// Requests made, retries included.
        attempts: u32,
        /// The store's last error.
        reason: String,
    },
    /// A URL that names no object store kiln-ml-data can read: an unknown scheme, a scheme whose
    /// feature is off, or a malformed URL or store option.
    #[error("cannot read {url}: {reason}")]
    UnsupportedUrl {
        /// The URL as given.
        url: String,
        /// Why, and the feature to turn on where one would help.
        reason: String,
    },
    /// A layout or plan was invalid.
    #[error(transparent)]
    Core(#[from] kiln_ml_core::Error),
    /// A preprocessing cache ([`kiln_ml_cache::Cached`]) between the source and the loader failed
    /// in a way only a cache can: a transform rejected a sample, a sample did not encode, a
    /// segment failed verification.
    ///
    /// The failures both crates share arrive as [`Error::Read`] (see the
    /// `From<kiln_ml_cache::Error>` impl), and an inner source's failure as the inner error
    /// itself when it is kiln-ml-data's (a Parquet error under the cache).
    #[error(transparent)]
    Cache(kiln_ml_cache::Error),
    /// A resume point was saved on another stream: other files (added, removed or rewritten),
    /// another seed, other sampler settings, or a kiln release that changed the sampler's plans
    /// (its settings fingerprint carries a version). Its position would repeat or skip samples here.
    #[error(
        "cannot resume: the saved position counts in another data stream (data key {saved}, now {current}): the files, the seed or the sampler settings changed since it was saved, or a kiln release plans them differently; resume with `Loader::resume_epoch` to continue anyway"
    )]
    DataChanged {
        /// The data key saved with the position.
        saved: kiln_ml_core::Fingerprint,
        /// The data key of the source, seed and sampler now.
        current: kiln_ml_core::Fingerprint,
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
    /// Sample sizes could not be kept on disk
    /// ([`ParquetSourceBuilder::sample_sizes_kept`](crate::ParquetSourceBuilder::sample_sizes_kept)).
    #[error("cannot keep the sample sizes in {path}: {reason}")]
    SizesNotKept {
        /// The directory or file that could not be written.
        path: PathBuf,
        /// Why.
        reason: String,
    },
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
        /// Batches of the epoch delivered before it stopped, counted from the epoch's start as
        /// batch numbers are (a resumed epoch's skipped batches included).
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
        ReadError::io(action, path, source).into()
    }

    /// Wraps an inner source's error with the block and file, unless it already is a kiln-ml-data
    /// or kiln-ml-cache error (which names its file or block itself).
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
        match boxed.downcast::<kiln_ml_cache::Error>() {
            Ok(cache) => Self::from(*cache),
            Err(other) => Self::from_read(ReadError::Source {
                location,
                block,
                file,
                source: other,
            }),
        }
    }

    /// A shared read failure; an inner source's error that is kiln-ml-data's own comes back as
    /// itself (a Parquet error read through a cache is the same error as without it).
    fn from_read(read: ReadError) -> Self {
        match read {
            ReadError::Source {
                location,
                block,
                file,
                source,
            } => match source.downcast::<Error>() {
                Ok(own) => *own,
                Err(source) => Self::Read(ReadError::Source {
                    location,
                    block,
                    file,
                    source,
                }),
            },
            other => Self::Read(other),
        }
    }

    /// The text of a caught panic payload.
    pub(crate) fn panicked(task: String, payload: Box<dyn std::any::Any + Send>) -> Self {
        ReadError::panicked(task, payload).into()
    }
}

impl From<kiln_ml_cache::Error> for Error {
    /// A cache error as kiln-ml-data reports it with or without the cache: the failures both
    /// crates share stay [`Error::Read`] (an inner source's kiln-ml-data error unwrapped), the
    /// cache's own failures are kept as [`Error::Cache`].
    fn from(error: kiln_ml_cache::Error) -> Self {
        match error {
            kiln_ml_cache::Error::Read(read) => Self::from_read(read),
            other => Self::Cache(other),
        }
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
        let inner = Error::from(ReadError::NoSuchBlock {
            block: 4,
            blocks: 2,
        });
        assert!(matches!(
            Error::from_source("block 4 (file 0)".to_owned(), 4, 0, inner),
            Error::Read(ReadError::NoSuchBlock { .. })
        ));
        let foreign = std::io::Error::other("disk on fire");
        let wrapped = Error::from_source("block 4 (file 1)".to_owned(), 4, 1, foreign);
        assert_eq!(
            wrapped.to_string(),
            "reading block 4 (file 1) failed: disk on fire"
        );
    }

    #[test]
    fn cache_errors_read_as_without_the_cache() {
        let location = || "block 3 (file 0)".to_owned();
        // What the cache's inner source reported, as the cache hands it on: the inner error.
        let passed_on = kiln_ml_cache::Error::Read(ReadError::Source {
            location: location(),
            block: 3,
            file: 0,
            source: Box::new(Error::from(ReadError::NoSuchBlock {
                block: 3,
                blocks: 2,
            })),
        });
        let error = Error::from_source(location(), 3, 0, passed_on);
        assert!(
            matches!(error, Error::Read(ReadError::NoSuchBlock { block: 3, .. })),
            "{error}"
        );
        // A foreign inner error: the shared `Source`, with the cache's message.
        let foreign = kiln_ml_cache::Error::Read(ReadError::Source {
            location: location(),
            block: 3,
            file: 0,
            source: Box::new(std::io::Error::other("disk on fire")),
        });
        let message = foreign.to_string();
        let error = Error::from(foreign);
        assert!(
            matches!(error, Error::Read(ReadError::Source { block: 3, .. })),
            "{error}"
        );
        assert_eq!(error.to_string(), message);
        // Failures both crates share keep their message, outside `Error::Cache`.
        let cases = [
            ReadError::Panicked {
                task: "warming block 1 (file 0)".to_owned(),
                message: "boom".to_owned(),
            },
            ReadError::NoSuchBlock {
                block: 7,
                blocks: 2,
            },
        ];
        for read in cases {
            let cache = kiln_ml_cache::Error::Read(read);
            let message = cache.to_string();
            let error = Error::from_source(location(), 1, 0, cache);
            assert!(matches!(error, Error::Read(_)), "{error}");
            assert_eq!(error.to_string(), message);
        }
        // The cache's own failures stay the cache's.
        let encode = kiln_ml_cache::Error::Encode {
            location: location(),
            block: 3,
            row: 1,
            reason: "too large".to_owned(),
        };
        let message = encode.to_string();
        let error = Error::from(encode);
        assert!(
            matches!(
                error,
                Error::Cache(kiln_ml_cache::Error::Encode { row: 1, .. })
            ),
            "{error}"
        );
        assert_eq!(error.to_string(), message);
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
