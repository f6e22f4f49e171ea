//! What tells a local file unchanged since its footer was read without reading the footer
//! again: on Unix, its device, inode and status-change time (ctime).
//!
//! Every write to a file, a rename over it and every `utimes` (the call `cp -p` and `touch`
//! use to set a modification time back) move its ctime to the present, and no call sets it
//! back. So while size, modification time and this stamp are what they were, the bytes are
//! too, and a block read needs one `fstat` instead of a read and hash of the whole footer (which
//! grows with row groups × columns).
//!
//! Timestamps advance by clock ticks (up to 10 ms on Linux kernels before 6.13, more on some
//! network file systems), so two changes within one tick may leave the same ctime. A stamp
//! therefore vouches for a file only once the file's last change is [`RACY_MARGIN`] older than
//! the check that compared its footer (git's rule for "racily clean" files); until then, and
//! whenever the stamp moves (a `chmod`, a new link), the footer is compared, and a stamp that
//! passes is kept for the next reads. Off Unix there is no stamp: the footer is compared at
//! every read.

use std::fs::Metadata;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How much older than the check that compared a file's footer its last change must be for
/// its stamp to vouch for it.
const RACY_MARGIN: Duration = if cfg!(test) {
    Duration::from_millis(100)
} else {
    Duration::from_secs(2)
};

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

    /// Whether the file's last change is at least [`RACY_MARGIN`] older than `checked_at`.
    fn settled_by(&self, checked_at: SystemTime) -> bool {
        let (Ok(seconds), Ok(nanos)) = (
            u64::try_from(self.changed_seconds),
            u32::try_from(self.changed_nanos),
        ) else {
            return false;
        };
        let changed = UNIX_EPOCH + Duration::new(seconds, nanos);
        changed + RACY_MARGIN <= checked_at
    }
}

/// The stamp that vouches for a file's footer, if any (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct Vouched(Mutex<Option<ChangeStamp>>);

impl Vouched {
    /// Whether `stamp` is the one that vouches for the file: no footer comparison needed.
    pub(crate) fn vouches_for(&self, stamp: Option<ChangeStamp>) -> bool {
        stamp.is_some() && *self.lock() == stamp
    }

    /// Records that the footer compared equal at `checked_at` (a time taken before `stamp` was
    /// read): `stamp` vouches for the file from now on if the file's last change had settled.
    pub(crate) fn footer_matched(&self, stamp: Option<ChangeStamp>, checked_at: SystemTime) {
        if let Some(stamp) = stamp
            && stamp.settled_by(checked_at)
        {
            *self.lock() = Some(stamp);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ChangeStamp>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clone for Vouched {
    fn clone(&self) -> Self {
        Self(Mutex::new(*self.lock()))
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Past any clock tick, so that each change below lands in a tick of its own.
    const PAST_A_TICK: Duration = Duration::from_millis(30);

    #[test]
    fn a_write_a_rename_over_and_a_chmod_move_the_stamp_and_a_read_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"one").unwrap();
        let stamp = || ChangeStamp::of(&std::fs::metadata(&path).unwrap()).unwrap();
        let first = stamp();
        std::fs::read(&path).unwrap();
        assert_eq!(stamp(), first, "a read changes nothing");

        std::thread::sleep(PAST_A_TICK);
        std::fs::write(&path, b"two").unwrap();
        let written = stamp();
        assert_ne!(written, first, "a same-size write");

        std::thread::sleep(PAST_A_TICK);
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

    /// A stamp vouches only for a change older than the margin: a file changed just before its
    /// footer was compared is compared again at the next read.
    #[test]
    fn a_fresh_change_does_not_vouch_until_it_settles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"one").unwrap();
        let stamp = ChangeStamp::of(&std::fs::metadata(&path).unwrap());
        let vouched = Vouched::default();
        vouched.footer_matched(stamp, SystemTime::now());
        assert!(!vouched.vouches_for(stamp), "changed just now");
        vouched.footer_matched(stamp, SystemTime::now() + RACY_MARGIN);
        assert!(vouched.vouches_for(stamp));
        assert!(!vouched.vouches_for(None));
    }
}
