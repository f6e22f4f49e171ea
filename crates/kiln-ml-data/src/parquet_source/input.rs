//! What a source is asked to read (inputs) and what discovery finds (files): a leaf module that
//! discovery, URL resolution and the source share.

use std::path::PathBuf;

use super::partition::Partitions;

/// Where to look for Parquet files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// One file, taken as given (whatever its name or extension).
    File(PathBuf),
    /// Every `*.parquet` file under a directory, recursively, in path order.
    Dir(PathBuf),
    /// Every file matching a glob pattern, in path order.
    Glob(String),
    /// An object-store URL: one object, or every Parquet object under a prefix; or a `file://`
    /// URL, read as the local file or directory it names.
    Url(String),
}

/// A file to read: its canonical path (so the same file reached by two paths has one identity;
/// an object's URL) and the Hive partition values of the path it was found by.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    pub(crate) partitions: Partitions,
    /// Where an object-store file lives; `None` for a local file.
    #[cfg(feature = "remote")]
    pub(crate) remote: Option<super::remote::RemoteObject>,
}
