//! The failures of reading a block that every block source shares, named once: kiln-ml-data's
//! Parquet source and kiln-ml-cache in front of any source report them alike, so a failure reads
//! the same with or without a cache in between.

use std::path::PathBuf;

use crate::{BlockIndex, FileId};

/// A boxed error from a component a block source wraps (an inner source, a transform).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong while reading a block, in terms every block source shares. Each variant
/// names where: the file, the block with its location, the worker's task.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
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
    /// A block index past the end of the layout.
    #[error("block {block} does not exist: the layout has {blocks} blocks")]
    NoSuchBlock {
        /// The block asked for.
        block: BlockIndex,
        /// How many blocks there are.
        blocks: usize,
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
    /// A worker panicked while reading a block, collating a batch or warming a cache.
    #[error("a worker panicked while {task}: {message}")]
    Panicked {
        /// What the worker was doing, with the block, file or batch it was working on.
        task: String,
        /// The panic message.
        message: String,
    },
}

impl ReadError {
    /// An I/O failure: `action` ("opening", "reading", ...) on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A caught panic, its payload as text.
    pub fn panicked(task: String, payload: Box<dyn std::any::Any + Send>) -> Self {
        Self::Panicked {
            task,
            message: crate::panic_message(payload.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_where() {
        let io = ReadError::io("opening", "data/a.parquet", std::io::Error::other("gone"));
        assert_eq!(io.to_string(), "opening data/a.parquet: gone");
        let missing = ReadError::NoSuchBlock {
            block: 4,
            blocks: 2,
        };
        assert_eq!(
            missing.to_string(),
            "block 4 does not exist: the layout has 2 blocks"
        );
        let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let panicked = ReadError::panicked("reading block 2".to_owned(), payload);
        assert_eq!(
            panicked.to_string(),
            "a worker panicked while reading block 2: boom 7"
        );
    }
}
