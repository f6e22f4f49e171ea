//! The one error type of kiln-ml-cache.

use std::path::PathBuf;

use kiln_ml_core::{BlockIndex, BoxError, FileId, ReadError};

/// A `Result` whose error is kiln-ml-cache's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while reading, computing, encoding or storing cached samples.
///
/// Every variant names where it happened: the segment file, the block with its location, the
/// sample's row, so the message can be acted on without a debugger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading a block failed in a way every block source can fail (kiln-ml-core's shared
    /// vocabulary): I/O on a cache file, a missing block, the inner source's error, a panic.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A sample could not be encoded for the cache.
    #[error("cannot encode sample {row} of block {block} ({location}) for the cache: {reason}")]
    Encode {
        /// Where the block lives (the file path and row group when the layout knows them).
        location: String,
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
}

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<std::path::PathBuf>,
        source: std::io::Error,
    ) -> Self {
        ReadError::io(action, path, source).into()
    }

    /// Wraps an inner source's error with the block and file, unless it already is a
    /// kiln-ml-cache error (a cache stacked on a cache, which names its block itself).
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
            Err(source) => ReadError::Source {
                location,
                block,
                file,
                source,
            }
            .into(),
        }
    }

    /// The text of a caught panic payload.
    pub(crate) fn panicked(task: String, payload: Box<dyn std::any::Any + Send>) -> Self {
        ReadError::panicked(task, payload).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn panic_payloads_become_text() {
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let error = Error::panicked("warming block 2".to_owned(), payload);
        assert_eq!(
            error.to_string(),
            "a worker panicked while warming block 2: boom 7"
        );
        let payload = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        let error = Error::panicked("warming block 3".to_owned(), payload);
        assert!(
            error
                .to_string()
                .ends_with("a panic with a non-text payload")
        );
    }
}
