//! What tells a local file unchanged since its footer was read without reading the footer
//! again: on Unix, its device, inode and status-change time (ctime).
//!
//! Every write to a file, a rename over it and every `utimes` (the call `cp -p` and `touch`
//! use to set a modification time back) move its ctime to the present, and no call sets it
//! back. So while size, modification time and this stamp are what they were, the bytes are
//! too, and a block read needs one `fstat` instead of a read and hash of the whole footer (which
//! grows with row groups × columns). A moved stamp only says "look": the footer is compared
//! then, as on systems without a stamp, so a `chmod` costs one footer read, not an error.
//! (A file system whose ctime is as coarse as its clock tick could miss a same-size rewrite
//! within one tick of the open; Linux's local file systems keep nanoseconds.)

use std::fs::Metadata;

/// A local file's device, inode and status-change time, where the platform has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChangeStamp {
    device: u64,
    inode: u64,
    changed_seconds: i64,
    changed_nanos: i64,
}

impl ChangeStamp {
    /// The stamp of `metadata`; `None` off Unix, where a footer read decides instead.
    pub(crate) fn of(metadata: &Metadata) -> Option<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Some(Self {
                device: metadata.dev(),
                inode: metadata.ino(),
                changed_seconds: metadata.ctime(),
                changed_nanos: metadata.ctime_nsec(),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = metadata;
            None
        }
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_write_a_rename_over_and_a_chmod_move_the_stamp_and_a_read_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"one").unwrap();
        let stamp = || ChangeStamp::of(&std::fs::metadata(&path).unwrap()).unwrap();
        let first = stamp();
        std::fs::read(&path).unwrap();
        assert_eq!(stamp(), first, "a read changes nothing");

        std::fs::write(&path, b"two").unwrap();
        let written = stamp();
        assert_ne!(written, first, "a same-size write");

        let mut permissions = std::fs::metadata(&path).unwrap().permissions();
        permissions.set_mode(0o600);
        std::fs::set_permissions(&path, permissions).unwrap();
        let chmodded = stamp();
        assert_ne!(chmodded, written, "a chmod");

        let other = dir.path().join("b");
        std::fs::write(&other, b"two").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_ne!(stamp(), chmodded, "a rename over the file");
    }
}
