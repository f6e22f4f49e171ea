//! The directory walk behind discovery: path order, other tools' names skipped, links followed
//! without looping.

use std::fs::DirEntry;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Names other tools own: Spark's `_SUCCESS` and `_temporary`, Delta's `_delta_log`, the
/// `_metadata` summaries, editors' and sync tools' dot files.
pub(crate) fn is_skipped_name(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('.')
}

/// The order a [`Walk`] finds files in, for `/`-separated relative paths (object-store keys):
/// name by name, each compared byte by byte. A directory's files all come before those of a
/// sibling whose name it is a prefix of (`en/` before `en-US/`), and a directory `a/` before a
/// file `a.parquet`, where comparing whole keys puts `-` and `.` before `/`.
#[cfg(any(feature = "remote", test))]
pub(crate) fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

/// A recursive directory walk in path order ([`path_order`]) that follows links.
pub(crate) struct Walk<'a> {
    /// Which files (and dangling links) are wanted.
    accept: Box<dyn Fn(&Path) -> bool + 'a>,
    /// Which `_`/`.` names are read anyway (a glob that spells them out).
    keep_skipped: Box<dyn Fn(&str) -> bool + 'a>,
    /// How many levels below the root files may lie (`None`: any).
    max_depth: Option<usize>,
    /// Canonical paths of the directories being walked: a link back to one is a cycle.
    ancestors: Vec<PathBuf>,
    found: Vec<PathBuf>,
}

impl<'a> Walk<'a> {
    /// A walk that keeps the files `accept` wants, skipping `_`/`.` names, to any depth.
    pub(crate) fn new(accept: impl Fn(&Path) -> bool + 'a) -> Self {
        Self {
            accept: Box::new(accept),
            keep_skipped: Box::new(|_| false),
            max_depth: None,
            ancestors: Vec::new(),
            found: Vec::new(),
        }
    }

    /// Reads `_`/`.` names that `keep` accepts.
    pub(crate) fn keeping(mut self, keep: impl Fn(&str) -> bool + 'a) -> Self {
        self.keep_skipped = Box::new(keep);
        self
    }

    /// Looks for files at most `levels` below the root (`None`: any depth).
    pub(crate) fn max_depth(mut self, levels: Option<usize>) -> Self {
        self.max_depth = levels;
        self
    }

    /// The accepted files under `root`, in path order.
    pub(crate) fn run(mut self, root: &Path) -> Result<Vec<PathBuf>> {
        self.walk(root, 0)?;
        Ok(self.found)
    }

    fn walk(&mut self, dir: &Path, depth: usize) -> Result<()> {
        // `Path::new("").join(name)` is `name`: relative globs find relative paths.
        let listed = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let canonical = listed
            .canonicalize()
            .map_err(|source| Error::io("listing", listed, source))?;
        if self.ancestors.contains(&canonical) {
            return Ok(());
        }
        self.ancestors.push(canonical);
        let mut entries = std::fs::read_dir(listed)
            .and_then(|entries| entries.collect::<std::io::Result<Vec<DirEntry>>>())
            .map_err(|source| Error::io("listing", listed, source))?;
        entries.sort_by_key(DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if is_skipped_name(&name) && !(self.keep_skipped)(&name) {
                continue;
            }
            let path = dir.join(entry.file_name());
            self.visit(&entry, &path, depth + 1)?;
        }
        self.ancestors.pop();
        Ok(())
    }

    fn visit(&mut self, entry: &DirEntry, path: &Path, depth: usize) -> Result<()> {
        let mut kind = entry
            .file_type()
            .map_err(|source| Error::io("inspecting", path, source))?;
        if kind.is_symlink() {
            kind = match std::fs::metadata(path) {
                Ok(target) => target.file_type(),
                // A dangling link where data is expected would silently lose that data.
                Err(source) if (self.accept)(path) => {
                    return Err(Error::io("following the link", path, source));
                }
                Err(_) => return Ok(()),
            };
        }
        if kind.is_dir() {
            if self.max_depth.is_none_or(|max| depth < max) {
                self.walk(path, depth)?;
            }
        } else if kind.is_file() && (self.accept)(path) {
            self.found.push(path.to_owned());
        }
        Ok(())
    }
}
