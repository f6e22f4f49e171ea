//! The on-disk segment store: atomic writes, verified reads (memory-mapped for large segments),
//! LRU size limit.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use kiln_core::Fingerprint;
use lru::LruCache;
use memmap2::MmapOptions;

use super::segment::{Segment, SegmentBytes, SegmentKey, SegmentName, file_name};
use super::stats::{CacheStats, CorruptSegment, Counters};
use crate::{Error, Result};

/// Temporary files older than this are leftovers of crashed writers and are removed on open.
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);
/// How many corruption reports are kept (the count in the statistics is exact).
const KEPT_REPORTS: usize = 64;
/// Segments at least this large are memory-mapped, smaller ones read: see
/// [`DiskCache::with_mmap_threshold`].
pub const DEFAULT_MMAP_THRESHOLD: u64 = 2 << 20;

/// A directory of cache segments, one file per (layout, block, transform, codec) key.
///
/// - **Atomic writes**: a segment is written to a hidden temporary file in the same directory
///   and renamed into place, so a crash leaves either the whole segment or none. Temporary files
///   older than an hour are removed when the cache is opened, and so are segments of older
///   format versions (their names say it), which this build can never read. Segments of newer
///   versions are left alone and not counted: builds of two kiln versions may share a
///   directory without sharing segments.
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
///   rename is safe.
/// - **Size limit**: with [`with_limit_bytes`](Self::with_limit_bytes), the least recently used
///   segments are removed after a write that exceeds the limit. Recency is what this process
///   saw, and across runs the modification time, which a disk hit sets to now (best effort)
///   when there is a limit. The segment just written is always kept.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    limit_bytes: Option<u64>,
    mmap_threshold: u64,
    index: Mutex<DiskIndex>,
    counters: Counters,
    reports: Mutex<VecDeque<CorruptSegment>>,
    last_write_error: Mutex<Option<String>>,
    next_temp: AtomicU64,
    #[cfg(test)]
    fail_before_rename: std::sync::atomic::AtomicBool,
}

/// Known segments in least-recently-used order, with their sizes.
#[derive(Debug)]
struct DiskIndex {
    segments: LruCache<Fingerprint, u64>,
    bytes: u64,
}

impl DiskIndex {
    fn insert(&mut self, digest: Fingerprint, bytes: u64) {
        if let Some(old) = self.segments.put(digest, bytes) {
            self.bytes -= old;
        }
        self.bytes += bytes;
    }

    fn remove(&mut self, digest: &Fingerprint) {
        if let Some(old) = self.segments.pop(digest) {
            self.bytes -= old;
        }
    }
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
            if name.starts_with('.') && name.ends_with(".tmp") {
                let stale = modified.elapsed().is_ok_and(|age| age > STALE_TEMP_AGE);
                if stale {
                    // Best effort: another process may be removing it too.
                    let _ = std::fs::remove_file(entry.path());
                }
            } else {
                match SegmentName::parse(&name) {
                    SegmentName::Current(digest) => found.push((modified, digest, metadata.len())),
                    // Written by an older kiln: no build that reads this directory any more
                    // will read it. Newer versions' segments are left to the builds that wrote
                    // them (two versions may share a directory).
                    SegmentName::OlderVersion => {
                        let _ = std::fs::remove_file(entry.path());
                    }
                    SegmentName::NewerVersion | SegmentName::Foreign => {}
                }
            }
        }
        found.sort();
        let mut index = DiskIndex {
            segments: LruCache::unbounded(),
            bytes: 0,
        };
        for (_, digest, bytes) in found {
            index.insert(digest, bytes);
        }
        Ok(Self {
            dir,
            limit_bytes: None,
            mmap_threshold: DEFAULT_MMAP_THRESHOLD,
            index: Mutex::new(index),
            counters: Counters::default(),
            reports: Mutex::new(VecDeque::new()),
            last_write_error: Mutex::new(None),
            next_temp: AtomicU64::new(0),
            #[cfg(test)]
            fail_before_rename: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Limits the bytes of segments kept, evicting least recently used ones (now and after
    /// each write).
    pub fn with_limit_bytes(mut self, limit_bytes: u64) -> Self {
        self.limit_bytes = Some(limit_bytes);
        self.evict(None);
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
    /// come from `cargo bench -p kiln-data --bench segment_read` (see `docs/performance.md`);
    /// the best threshold depends on kernel and file system.
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

    /// The verified segment of `key`: `Ok(None)` when there is none; an
    /// [`Error::CorruptSegment`] (after removing the file and recording a report) when it fails
    /// verification.
    pub fn get(&self, key: &SegmentKey) -> Result<Option<Segment>> {
        let path = self.segment_path(key);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Counters::add(&self.counters.misses, 1);
                self.lock_index().remove(&key.digest());
                return Ok(None);
            }
            Err(source) => return Err(Error::io("opening", path, source)),
        };
        let len = file
            .metadata()
            .map_err(|source| Error::io("inspecting", &path, source))?
            .len();
        if len == 0 {
            return Err(self.discard_corrupt(key, "the file is empty".to_owned()));
        }
        let bytes = if len >= self.mmap_threshold {
            // SAFETY: a mapping is sound only while nobody modifies the file in place. kiln
            // never does: segments are created complete under a temporary name and renamed into
            // place, and replaced or evicted only by rename or unlink, which leave an existing
            // mapping's file intact. The map is read-only, and every byte is verified before
            // use. The cache directory must not be written by other programs (documented on
            // `DiskCache`).
            let map = unsafe { MmapOptions::new().map(&file) }
                .map_err(|source| Error::io("memory-mapping", &path, source))?;
            SegmentBytes::Mapped(map)
        } else {
            let capacity = usize::try_from(len).unwrap_or(usize::MAX);
            let mut buffer = Vec::new();
            buffer
                .try_reserve_exact(capacity)
                .map_err(|error| Error::io("reading", &path, std::io::Error::other(error)))?;
            (&file)
                .read_to_end(&mut buffer)
                .map_err(|source| Error::io("reading", &path, source))?;
            SegmentBytes::owned(buffer)
        };
        match Segment::verify(bytes, key) {
            Ok(segment) => {
                Counters::add(&self.counters.disk_hits, 1);
                Counters::add(&self.counters.bytes_read, len);
                let mut index = self.lock_index();
                if index.segments.get(&key.digest()).is_none() {
                    // Written by another process since we opened the directory.
                    index.insert(key.digest(), len);
                }
                drop(index);
                if self.limit_bytes.is_some() {
                    // The next run orders segments by modification time: make it the last use.
                    // Best effort (the file may be gone, or not ours to touch).
                    let _ = file.set_modified(SystemTime::now());
                }
                Ok(Some(segment))
            }
            Err(reason) => Err(self.discard_corrupt(key, reason)),
        }
    }

    /// Writes a finished segment atomically (temporary file, then rename) and applies the size
    /// limit.
    pub fn put(&self, key: &SegmentKey, bytes: &[u8]) -> Result<()> {
        let digest = key.digest();
        let path = self.segment_path(key);
        let temp = self.dir.join(format!(
            ".{digest}.{}.{}.tmp",
            std::process::id(),
            self.next_temp.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(source) = std::fs::write(&temp, bytes) {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::io("writing", temp, source));
        }
        #[cfg(test)]
        if self.fail_before_rename.load(Ordering::Relaxed) {
            // Leaves the temporary file behind, as a crash at this point would.
            return Err(Error::io(
                "renaming",
                temp,
                std::io::Error::other("injected failure"),
            ));
        }
        if let Err(source) = std::fs::rename(&temp, &path) {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::io("renaming", temp, source));
        }
        Counters::add(&self.counters.bytes_written, bytes.len() as u64);
        self.lock_index().insert(digest, bytes.len() as u64);
        self.evict(Some(digest));
        Ok(())
    }

    /// Removes a segment; whether there was one.
    pub fn remove(&self, key: &SegmentKey) -> Result<bool> {
        self.lock_index().remove(&key.digest());
        let path = self.segment_path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(Error::io("removing", path, source)),
        }
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

    /// Counts a failed write whose samples are served anyway, keeping its error.
    pub(crate) fn record_failed_write(&self, error: &Error) {
        Counters::add(&self.counters.failed_writes, 1);
        if let Ok(mut last) = self.last_write_error.lock() {
            *last = Some(error.to_string());
        }
    }

    /// Removes the segment of `key`, counts and records the corruption, and returns the error.
    pub(crate) fn discard_corrupt(&self, key: &SegmentKey, reason: String) -> Error {
        let path = self.segment_path(key);
        let _ = std::fs::remove_file(&path);
        self.lock_index().remove(&key.digest());
        Counters::add(&self.counters.corrupt_segments, 1);
        Counters::add(&self.counters.misses, 1);
        let report = CorruptSegment {
            path: path.clone(),
            block: key.block,
            reason: reason.clone(),
        };
        if let Ok(mut reports) = self.reports.lock() {
            if reports.len() == KEPT_REPORTS {
                reports.pop_front();
            }
            reports.push_back(report);
        }
        Error::CorruptSegment {
            path,
            block: key.block,
            reason,
        }
    }

    /// Removes least recently used segments while over the limit, sparing `keep`.
    fn evict(&self, keep: Option<Fingerprint>) {
        let Some(limit) = self.limit_bytes else {
            return;
        };
        let mut index = self.lock_index();
        while index.bytes > limit {
            let Some((digest, bytes)) = index.segments.pop_lru() else {
                break;
            };
            if Some(digest) == keep {
                index.segments.put(digest, bytes);
                if index.segments.len() == 1 {
                    break;
                }
                continue;
            }
            index.bytes -= bytes;
            // A reader holding the file mapped keeps its data; NotFound means another process
            // evicted it first.
            let _ = std::fs::remove_file(self.dir.join(file_name(digest)));
            Counters::add(&self.counters.evictions, 1);
        }
    }

    /// Like [`discard_corrupt`](Self::discard_corrupt) for a segment that passed verification
    /// (and was counted as a hit) but does not decode.
    pub(crate) fn discard_undecodable(&self, key: &SegmentKey, reason: String) -> Error {
        self.counters.disk_hits.fetch_sub(1, Ordering::Relaxed);
        self.discard_corrupt(key, reason)
    }

    fn lock_index(&self) -> std::sync::MutexGuard<'_, DiskIndex> {
        // The index holds plain numbers; a panic elsewhere cannot leave it inconsistent.
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::segment::{FORMAT_VERSION, SegmentBuilder};

    fn key(block: u32) -> SegmentKey {
        SegmentKey {
            layout: Fingerprint::of_bytes(b"layout"),
            block,
            transform: Fingerprint::of_bytes(b"t"),
            codec: Fingerprint::of_bytes(b"c"),
        }
    }

    fn segment(key: SegmentKey, payload: &[u8]) -> Vec<u8> {
        let mut builder = SegmentBuilder::new(key, 1);
        builder
            .push(|out| {
                out.extend_from_slice(payload);
                Ok::<_, ()>(())
            })
            .unwrap();
        builder.finish().unwrap()
    }

    #[test]
    fn mapped_and_read_segments_are_verified_alike() {
        let dir = tempfile::tempdir().unwrap();
        let len = segment(key(5), b"payload").len() as u64;
        // Segments of at least the threshold are mapped.
        for (threshold, mapped) in [(0, true), (len, true), (len + 1, false), (u64::MAX, false)] {
            let cache = DiskCache::open(dir.path())
                .unwrap()
                .with_mmap_threshold(threshold);
            cache.put(&key(5), &segment(key(5), b"payload")).unwrap();
            let found = cache.get(&key(5)).unwrap().unwrap();
            assert_eq!(found.record(0), b"payload");
            assert_eq!(found.is_mapped(), mapped, "threshold {threshold}");
            let mut damaged = segment(key(5), b"payload");
            let last = damaged.len() - 1;
            damaged[last] ^= 1;
            std::fs::write(cache.segment_path(&key(5)), &damaged).unwrap();
            let error = cache.get(&key(5)).unwrap_err();
            assert!(
                error.to_string().contains("record 0 is damaged"),
                "threshold {threshold}: {error}"
            );
            assert!(!cache.contains(&key(5)));
        }
    }

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
        cache.put(&key(0), &segment(key(0), b"x")).unwrap();
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
    fn put_then_get_round_trips_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        assert!(cache.get(&key(0)).unwrap().is_none());
        let bytes = segment(key(0), b"payload");
        cache.put(&key(0), &bytes).unwrap();
        let found = cache.get(&key(0)).unwrap().unwrap();
        assert_eq!(found.record(0), b"payload");
        let stats = cache.stats();
        assert_eq!((stats.misses, stats.disk_hits), (1, 1));
        assert_eq!(stats.bytes_written, bytes.len() as u64);
        assert_eq!(stats.bytes_read, bytes.len() as u64);
        assert_eq!(stats.disk_bytes, bytes.len() as u64);
        // A reopened cache finds the segment.
        let reopened = DiskCache::open(dir.path()).unwrap();
        assert_eq!(reopened.stats().disk_bytes, bytes.len() as u64);
        assert!(reopened.get(&key(0)).unwrap().is_some());
    }

    #[test]
    fn a_failure_between_write_and_rename_leaves_no_segment() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        cache.fail_before_rename.store(true, Ordering::Relaxed);
        let error = cache.put(&key(1), &segment(key(1), b"x")).unwrap_err();
        assert!(error.to_string().contains("injected failure"), "{error}");
        // The half-done write is invisible: no segment, a plain miss, nothing counted as stored.
        assert!(!cache.contains(&key(1)));
        assert!(cache.get(&key(1)).unwrap().is_none());
        assert_eq!(cache.stats().disk_bytes, 0);
        assert_eq!(cache.stats().corrupt_segments, 0);
        // A later write succeeds, and reopening ignores the leftover temporary file.
        cache.fail_before_rename.store(false, Ordering::Relaxed);
        cache.put(&key(1), &segment(key(1), b"x")).unwrap();
        let reopened = DiskCache::open(dir.path()).unwrap();
        assert_eq!(reopened.get(&key(1)).unwrap().unwrap().record(0), b"x");
        assert_eq!(reopened.stats().disk_bytes, cache.stats().disk_bytes);
    }

    #[test]
    fn corrupt_segments_are_removed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        let mut bytes = segment(key(2), b"payload");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        // Bypass `put` to plant a damaged file.
        std::fs::write(cache.segment_path(&key(2)), &bytes).unwrap();
        let error = cache.get(&key(2)).unwrap_err();
        assert!(
            matches!(error, Error::CorruptSegment { block: 2, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("record 0 is damaged"), "{error}");
        assert!(!cache.contains(&key(2)));
        let reports = cache.corrupt_segments();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].block, 2);
        assert_eq!(cache.stats().corrupt_segments, 1);
    }

    #[test]
    fn hits_under_a_size_limit_mark_the_segment_recently_used_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for limit in [None, Some(1 << 20)] {
            let mut cache = DiskCache::open(dir.path()).unwrap();
            if let Some(limit) = limit {
                cache = cache.with_limit_bytes(limit);
            }
            cache.put(&key(0), &segment(key(0), b"x")).unwrap();
            let path = cache.segment_path(&key(0));
            let file = File::options().write(true).open(&path).unwrap();
            file.set_modified(long_ago).unwrap();
            assert!(cache.get(&key(0)).unwrap().is_some());
            let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
            assert_eq!(modified > long_ago, limit.is_some(), "limit {limit:?}");
        }
    }

    #[test]
    fn the_size_limit_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let one = segment(key(0), &[7; 100]).len() as u64;
        let cache = DiskCache::open(dir.path())
            .unwrap()
            .with_limit_bytes(2 * one);
        for block in 0..2 {
            cache
                .put(&key(block), &segment(key(block), &[7; 100]))
                .unwrap();
        }
        // Touch block 0 so block 1 is the least recently used.
        assert!(cache.get(&key(0)).unwrap().is_some());
        cache.put(&key(2), &segment(key(2), &[7; 100])).unwrap();
        assert!(cache.contains(&key(0)));
        assert!(!cache.contains(&key(1)));
        assert!(cache.contains(&key(2)));
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(cache.stats().disk_bytes, 2 * one);
    }
}
