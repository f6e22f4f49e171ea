//! `DiskCache`: a directory of segments, how it is opened, configured and inspected.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::index::DiskIndex;
use crate::segment::{SegmentKey, SegmentName, is_segment_temporary};
use crate::stats::{CacheStats, CorruptSegment, Counters};
use crate::{Error, Result};

/// Temporary files older than this are leftovers of crashed writers and are removed on open.
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);
/// Segments at least this large are memory-mapped, smaller ones read: see
/// [`DiskCache::with_mmap_threshold`].
pub const DEFAULT_MMAP_THRESHOLD: u64 = 2 << 20;

/// A directory of cache segments, one file per (layout, block, transform, codec) key.
///
/// - **Atomic writes**: a segment is written to a hidden temporary file in the same directory
///   and renamed into place, so a process crash leaves either the whole segment or none (the
///   file is not synced: after a power loss a short segment fails verification and is rebuilt). Segments'
///   temporary files older than an hour are removed when the cache is opened, and so are segments of older
///   format versions (their names say it), which this build can never read. Segments of newer
///   versions are left alone and not counted. So builds of two segment format versions must
///   not share a directory while both run: the newer removes the older's segments when it opens.
/// - **Verified reads**: every byte of a segment is verified before use (header, index and
///   payload checksums, and the layout of the records); a corrupt segment is removed, reported
///   with its damaged records ([`corrupt_segments`](Self::corrupt_segments)) and never served.
///   Segments of 2 MiB or more are memory-mapped, smaller ones read into memory
///   ([`with_mmap_threshold`](Self::with_mmap_threshold) says why).
/// - **Concurrency**: any number of threads and processes may read and write the same directory.
///   Files are only ever created by rename and removed by unlink, never modified in place, so a
///   reader's mapping stays valid even if the segment is replaced or evicted meanwhile.
/// - **Other programs must not write into the directory.** Segments at or above the mmap
///   threshold are memory-mapped; a program that modified or truncated such a file in place
///   while it is mapped would change bytes after verification (undefined behaviour for the
///   reader) or make the reader's next access fault (`SIGBUS`). Deleting or replacing files by
///   rename is safe on a local file system.
/// - **Keep the directory on a local disk.** On a network file system (NFS), an unlinked file's
///   data is kept only for processes of the machine that unlinked it: another host evicting or
///   replacing a segment this one has mapped makes its next access fault (`SIGBUS`), and a
///   media error under a mapped segment does the same where a read would return an error. A shared
///   directory needs mapping off: [`with_mmap_threshold`](Self::with_mmap_threshold) with
///   `u64::MAX`.
/// - **Size limit**: with [`with_limit_bytes`](Self::with_limit_bytes), the least recently used
///   segments are removed after a write that exceeds the limit. Recency is what this process
///   saw, and across runs the modification time, which a disk hit sets to now (best effort)
///   when there is a limit. The segment just written is always kept; one larger than the
///   whole limit is not written. A [`Cached`](crate::Cached) source's writes spare its own
///   segments: once they fill the limit, its further blocks are not written
///   ([`CacheStats::declined_writes`](crate::CacheStats::declined_writes)) but computed when
///   read, so a cache smaller than its dataset keeps what it holds. The count is per process
///   (the segments listed at open, and those written or read since): two processes writing
///   into one directory at once may together exceed the limit.
#[derive(Debug)]
pub struct DiskCache {
    pub(super) dir: PathBuf,
    pub(super) limit_bytes: Option<u64>,
    pub(super) mmap_threshold: u64,
    pub(super) index: Mutex<DiskIndex>,
    pub(super) counters: Counters,
    pub(super) reports: Mutex<VecDeque<CorruptSegment>>,
    pub(super) last_write_error: Mutex<Option<String>>,
}

impl DiskCache {
    /// Opens (creating if needed) a cache directory, indexing the segments already there.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| Error::io("creating", &dir, source))?;
        let mut found = Vec::new();
        let entries =
            std::fs::read_dir(&dir).map_err(|source| Error::io("listing", &dir, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::io("listing", &dir, source))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(metadata) = entry.metadata() else {
                continue; // removed meanwhile by another process
            };
            let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if is_segment_temporary(&name) {
                let stale = modified.elapsed().is_ok_and(|age| age > STALE_TEMP_AGE);
                if stale {
                    // Best effort: another process may be removing it too.
                    let _ = std::fs::remove_file(entry.path());
                }
            } else {
                match SegmentName::parse(&name) {
                    SegmentName::Current(digest) => found.push((modified, digest, metadata.len())),
                    // Written by an older kiln, which this build can never read (an older build
                    // still running on this directory loses them: see the type's docs). Newer
                    // versions' segments are left to the builds that wrote them.
                    SegmentName::OlderVersion => {
                        let _ = std::fs::remove_file(entry.path());
                    }
                    SegmentName::NewerVersion | SegmentName::Foreign => {}
                }
            }
        }
        Ok(Self {
            dir,
            limit_bytes: None,
            mmap_threshold: DEFAULT_MMAP_THRESHOLD,
            index: Mutex::new(DiskIndex::from_found(found)),
            counters: Counters::default(),
            reports: Mutex::new(VecDeque::new()),
            last_write_error: Mutex::new(None),
        })
    }

    /// Limits the bytes of segments kept, evicting least recently used ones (now and after
    /// each write).
    pub fn with_limit_bytes(mut self, limit_bytes: u64) -> Self {
        self.limit_bytes = Some(limit_bytes);
        self.evict(None, &|_| false);
        self
    }

    /// Memory-maps segments of at least `bytes` and reads smaller ones into memory (default
    /// [`DEFAULT_MMAP_THRESHOLD`], 2 MiB; `0` maps every segment, `u64::MAX` none).
    ///
    /// Mapping a file costs a page-table entry and a fault per page, and unmapping a TLB
    /// flush, where a read is one copy. For small segments the copy is cheaper: on Linux 6.18
    /// and ext4, 256 KiB segments are read and verified 1.3-1.5x faster than mapped and
    /// verified, and around 1 MiB mapping is fast or slow depending on the folio sizes the page
    /// cache holds. From 2 MiB on, the page cache holds whole 2 MiB folios that map in one entry
    /// each, and a mapped segment is verified in one pass over the page cache with no copy:
    /// 1.2-1.5x faster than reading, and no second copy of the data in memory. Those figures
    /// come from `cargo bench -p kiln-ml-cache --bench segment_read` (see `docs/performance.md`);
    /// the best threshold depends on kernel and file system.
    ///
    /// A segment the file system refuses to map (some FUSE mounts and network file systems
    /// do) is read instead.
    pub fn with_mmap_threshold(mut self, bytes: u64) -> Self {
        self.mmap_threshold = bytes;
        self
    }

    /// Segments at least this large are memory-mapped, smaller ones read.
    pub fn mmap_threshold(&self) -> u64 {
        self.mmap_threshold
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size limit, if any.
    pub fn limit_bytes(&self) -> Option<u64> {
        self.limit_bytes
    }

    /// Where the segment of `key` lives.
    pub fn segment_path(&self, key: &SegmentKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// Whether a segment file for `key` exists (not verified).
    pub fn contains(&self, key: &SegmentKey) -> bool {
        self.segment_path(key).is_file()
    }

    /// Counters since the cache was opened (the RAM fields are zero: see
    /// [`Cached::stats`](crate::Cached::stats)).
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            disk_bytes: self.lock_index().bytes,
            ..self.counters.snapshot()
        }
    }

    /// The most recent corruption reports (up to 64; the statistics count them all).
    pub fn corrupt_segments(&self) -> Vec<CorruptSegment> {
        self.reports
            .lock()
            .map(|reports| reports.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The last error of a write that failed while serving reads (counted in
    /// [`CacheStats::failed_writes`]), if any.
    pub fn last_write_error(&self) -> Option<String> {
        self.last_write_error
            .lock()
            .ok()
            .and_then(|error| error.clone())
    }

    pub(super) fn lock_index(&self) -> std::sync::MutexGuard<'_, DiskIndex> {
        // The index holds plain numbers; a panic elsewhere cannot leave it inconsistent.
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::FORMAT_VERSION;
    use crate::test_support::{key, one_record};

    #[test]
    fn opening_removes_segments_of_older_format_versions_only() {
        let dir = tempfile::tempdir().unwrap();
        let digest = key(0).digest();
        let old = dir.path().join(format!("{digest}.seg"));
        let newer = dir
            .path()
            .join(format!("{digest}.v{}.seg", FORMAT_VERSION + 1));
        let unrelated = dir.path().join("notes.seg");
        for path in [&old, &newer, &unrelated] {
            std::fs::write(path, b"bytes").unwrap();
        }
        let cache = DiskCache::open(dir.path()).unwrap();
        cache.put(&key(0), &one_record(key(0), b"x")).unwrap();
        let reopened = DiskCache::open(dir.path()).unwrap();
        assert!(!old.exists());
        assert!(
            newer.exists(),
            "a newer kiln sharing the directory keeps its segments"
        );
        assert!(
            unrelated.exists(),
            "files that are not segments are left alone"
        );
        assert!(reopened.get(&key(0)).unwrap().is_some());
        assert_eq!(reopened.stats().disk_bytes, cache.stats().disk_bytes);
    }

    #[test]
    fn opening_removes_stale_temporary_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let digest = key(0).digest();
        let [stale, fresh, foreign] = [
            format!(".{digest}.v2.seg.a1.tmp"),
            format!(".{digest}.v2.seg.b2.tmp"),
            ".notes.tmp".to_owned(),
        ]
        .map(|name| dir.path().join(name));
        for path in [&stale, &fresh, &foreign] {
            std::fs::write(path, b"half a segment").unwrap();
        }
        let long_ago = SystemTime::now() - 2 * STALE_TEMP_AGE;
        for old in [&stale, &foreign] {
            let file = std::fs::File::options().write(true).open(old).unwrap();
            file.set_modified(long_ago).unwrap();
        }
        let cache = DiskCache::open(dir.path()).unwrap();
        assert!(!stale.exists());
        assert!(
            foreign.exists(),
            "a temporary file that is not a segment's is left alone"
        );
        assert!(fresh.exists(), "a writer may still be about to rename it");
        assert_eq!(cache.stats().disk_bytes, 0);
    }
}
