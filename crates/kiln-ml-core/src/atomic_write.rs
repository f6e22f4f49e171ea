//! Whole-file writes that a reader sees complete or not at all, with one rule for how durable
//! they are.

use std::io::Write;
use std::path::{Path, PathBuf};

/// How far [`write_atomic`] takes a write before it returns. The rule: what cannot be rebuilt
/// (checkpoints, reports, results) is [`Synced`](Durability::Synced); what is verified when
/// read and rebuilt when missing (checksummed cache segments) is
/// [`Renamed`](Durability::Renamed), which spares an fsync per write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The file's bytes, then its directory entry, are flushed to the disk (fsync of the file
    /// before the rename, of the directory after it, where directories can be synced): the
    /// write survives a crash or a power loss.
    Synced,
    /// Atomic against other processes and crashes of this one, but nothing is flushed: after a
    /// power loss the file may be missing or hold fewer bytes.
    Renamed,
}

/// An atomic write that failed: what was being done, to which path. The destination is never
/// left half-written, and the temporary file is removed.
#[derive(Debug, thiserror::Error)]
#[error("{action} {path}: {source}")]
pub struct WriteError {
    /// What failed ("creating a temporary file in", "writing", "syncing", "renaming into
    /// place", "syncing the directory").
    pub action: &'static str,
    /// The file or directory it failed on.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: std::io::Error,
}

/// Writes `bytes` to `path` through a temporary file in the same directory (named
/// `.NAME.XXXXXX.tmp`, NAME cut to 200 bytes, so a crash leaves only dot-files ending in `.tmp`
/// behind) and a rename.
/// The directory must exist (a cache whose directory went away fails its write rather than
/// recreating it). Readers see the old file or the new one, never a part. On Unix a file that
/// replaces another keeps the other's mode (a checkpoint made private stays private), and a new
/// one gets the mode `File::create` gives (0666 less the umask), not a temporary file's 0600.
///
/// ```
/// use kiln_ml_core::{Durability, write_atomic};
///
/// let dir = std::env::temp_dir().join(format!("kiln-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("report.json");
/// write_atomic(&path, b"{}", Durability::Synced).unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"{}");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> Result<(), WriteError> {
    let failed = |action: &'static str, at: &Path| {
        let path = at.to_path_buf();
        move |source| WriteError {
            action,
            path,
            source,
        }
    };
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy());
    let prefix = format!(".{}.", shortened(&name, MAX_PREFIX_NAME_BYTES));
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut file = builder
        .tempfile_in(directory)
        .map_err(failed("creating a temporary file in", directory))?;
    // The umask applied to the 0666 above; a replaced file's own mode is set as it was.
    #[cfg(unix)]
    if let Ok(replaced) = std::fs::metadata(path) {
        file.as_file()
            .set_permissions(replaced.permissions())
            .map_err(failed("setting the permissions of", file.path()))?;
    }
    file.write_all(bytes)
        .map_err(failed("writing", file.path()))?;
    if durability == Durability::Synced {
        file.as_file()
            .sync_all()
            .map_err(failed("syncing", file.path()))?;
    }
    file.persist(path)
        .map_err(|error| failed("renaming into place", path)(error.error))?;
    if durability == Durability::Synced {
        sync_directory(directory).map_err(failed("syncing the directory", directory))?;
    }
    Ok(())
}

/// Creates `directory` and its missing parents, as `std::fs::create_dir_all` does, and flushes
/// each new directory's entry in its parent, so that a file written into it with
/// [`Durability::Synced`] survives a power loss with the directories leading to it.
pub fn create_dir_all_synced(directory: &Path) -> Result<(), WriteError> {
    let missing: Vec<&Path> = directory
        .ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.exists())
        .collect();
    std::fs::create_dir_all(directory).map_err(|source| WriteError {
        action: "creating the directory",
        path: directory.to_path_buf(),
        source,
    })?;
    // From the outermost new directory inwards: each one's entry in its parent.
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        sync_directory(parent).map_err(|source| WriteError {
            action: "syncing the directory",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// The most bytes of the destination's name in the temporary file's: with the dot, the
/// random part and `.tmp` a full 255-byte name would exceed what file systems allow.
const MAX_PREFIX_NAME_BYTES: usize = 200;

/// `name` cut to at most `max` bytes, at a character boundary.
fn shortened(name: &str, max: usize) -> &str {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Flushes `directory`'s entries, so that a rename into it survives a power loss. On Unix a
/// failure is an error, except where the file system cannot sync a directory (`EINVAL`);
/// elsewhere directories cannot be opened for it, and the rename is as durable as the platform
/// makes it.
fn sync_directory(directory: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        match std::fs::File::open(directory)?.sync_all() {
            Err(error) if error.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
            other => other,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = directory;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("out.json");
        std::fs::create_dir(dir.path().join("nested")).unwrap();
        for (bytes, durability) in [
            (&b"first"[..], Durability::Synced),
            (b"2nd", Durability::Renamed),
        ] {
            write_atomic(&path, bytes, durability).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
        }
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.json"]);
        #[cfg(unix)]
        {
            // The mode a plain new file gets here (0666 less the umask).
            use std::os::unix::fs::PermissionsExt;
            let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            let plain = dir.path().join("plain");
            std::fs::File::create(&plain).unwrap();
            let fresh = dir.path().join("fresh.json");
            write_atomic(&fresh, b"{}", Durability::Renamed).unwrap();
            assert_eq!(mode(&fresh), mode(&plain));
        }
    }

    /// A file made private stays private when it is replaced.
    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.kiln");
        write_atomic(&path, b"first", Durability::Synced).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&path, b"second", Durability::Synced).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
    }

    #[test]
    fn missing_directories_are_created() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a").join("b").join("c");
        create_dir_all_synced(&nested).unwrap();
        assert!(nested.is_dir());
        // Already there: nothing to do.
        create_dir_all_synced(&nested).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let error = create_dir_all_synced(&file.join("below")).unwrap_err();
        assert_eq!(error.action, "creating the directory");
    }

    #[test]
    fn a_name_near_the_file_system_limit_is_written() {
        let dir = tempfile::tempdir().unwrap();
        // 250 bytes, with multi-byte characters across the cut.
        let name = format!("{}{}.json", "é".repeat(100), "x".repeat(45));
        assert_eq!(name.len(), 250);
        let path = dir.path().join(&name);
        write_atomic(&path, b"data", Durability::Synced).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_rename_names_the_path_and_keeps_the_old_state() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should go: the rename fails.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        let error = write_atomic(&path, b"data", Durability::Synced).unwrap_err();
        assert_eq!(error.action, "renaming into place");
        assert_eq!(error.path, path);
        assert!(
            error.to_string().starts_with("renaming into place "),
            "{error}"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["taken"], "the temporary file is gone");
    }
}
