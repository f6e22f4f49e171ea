//! Writing and removing segments: atomic renames, failed-write accounting, the size limit.

use kiln_ml_core::{Durability, Fingerprint, write_atomic};

use super::index::DiskIndex;
use super::store::DiskCache;
use crate::segment::{SegmentKey, file_name};
use crate::stats::Counters;
use crate::{Error, Result};

impl DiskCache {
    /// Writes a finished segment atomically (temporary file, then rename) and applies the size
    /// limit; whether it was written: a segment larger than the whole limit is not (it would
    /// evict every other segment and still not fit), and is counted as declined.
    pub fn put(&self, key: &SegmentKey, bytes: &[u8]) -> Result<bool> {
        self.put_sparing(key, bytes, &|_| false)
    }

    /// Writes a segment of one dataset's cache, whose other segments `own` tells apart, and
    /// applies the size limit to the rest: `false` (nothing written, counted as declined) when
    /// those segments and this one would exceed the limit. A cache smaller than its dataset
    /// then keeps what it holds, instead of evicting the block read soonest (the least
    /// recently used, in a sequential epoch) for every block it reads; the declined blocks are
    /// computed when read, as without a cache. Other segments are evicted, least recently used
    /// first.
    ///
    /// Threads that check at once could each find room for their segment alone: after the
    /// write, the check is made again where the index is updated, and a segment that went past
    /// the limit is removed again (declined).
    pub(crate) fn put_sparing(
        &self,
        key: &SegmentKey,
        bytes: &[u8],
        own: &dyn Fn(&Fingerprint) -> bool,
    ) -> Result<bool> {
        let digest = key.digest();
        let len = bytes.len() as u64;
        if let Some(limit) = self.limit_bytes {
            let index = self.lock_index();
            let replaced = index.segments.peek(&digest).copied().unwrap_or(0);
            // Room without evicting: whose the other segments are does not matter.
            let fits = index.bytes - replaced + len <= limit;
            if !fits && own_bytes(&index, own, digest) + len > limit {
                drop(index);
                Counters::add(&self.counters.declined_writes, 1);
                return Ok(false);
            }
        }
        let path = self.segment_path(key);
        // Segments are checksummed and rebuilt when missing: atomic, not synced (an fsync per
        // segment would slow the first epoch for nothing a reader cannot detect).
        write_atomic(&path, bytes, Durability::Renamed)
            .map_err(|error| Error::io(error.action, error.path, error.source))?;
        let mut index = self.lock_index();
        index.insert(digest, len);
        if let Some(limit) = self.limit_bytes
            && own_bytes(&index, own, digest) + len > limit
        {
            index.remove(&digest);
            drop(index);
            // Not found: a thread that wrote the same block backed out first. Any other
            // failure leaves a file this process does not count; the next open lists it.
            let _ = std::fs::remove_file(&path);
            Counters::add(&self.counters.declined_writes, 1);
            return Ok(false);
        }
        drop(index);
        Counters::add(&self.counters.bytes_written, len);
        self.evict(Some(digest), own);
        Ok(true)
    }

    /// Segments forgotten so far (see `DiskIndex::removals`).
    pub(crate) fn removals(&self) -> u64 {
        self.lock_index().removals
    }

    /// Counts a segment not written because its source's segments fill the size limit.
    pub(crate) fn count_declined(&self) {
        Counters::add(&self.counters.declined_writes, 1);
    }

    /// Removes a segment; whether there was one. A segment that could not be deleted stays
    /// counted (it is still on disk).
    pub fn remove(&self, key: &SegmentKey) -> Result<bool> {
        let path = self.segment_path(key);
        let removed = match std::fs::remove_file(&path) {
            Ok(()) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => return Err(Error::io("removing", path, source)),
        };
        self.lock_index().remove(&key.digest());
        Ok(removed)
    }

    /// Counts a failed write whose samples are served anyway, keeping its error.
    pub(crate) fn record_failed_write(&self, error: &Error) {
        Counters::add(&self.counters.failed_writes, 1);
        if let Ok(mut last) = self.last_write_error.lock() {
            *last = Some(error.to_string());
        }
    }

    /// Removes least recently used segments while over the limit, sparing `keep` and the
    /// segments `spare` names. Segments that do not delete stay counted (still on disk).
    pub(super) fn evict(&self, keep: Option<Fingerprint>, spare: &dyn Fn(&Fingerprint) -> bool) {
        let Some(limit) = self.limit_bytes else {
            return;
        };
        let mut index = self.lock_index();
        if index.bytes <= limit {
            return;
        }
        // Least recently used first.
        let candidates: Vec<Fingerprint> = (index.segments.iter().rev())
            .map(|(digest, _)| *digest)
            .filter(|digest| Some(*digest) != keep && !spare(digest))
            .collect();
        for digest in candidates {
            if index.bytes <= limit {
                break;
            }
            // A reader holding the file mapped keeps its data. NotFound means another process
            // evicted or removed it first: gone from the disk, but not this cache's eviction.
            match std::fs::remove_file(self.dir.join(file_name(digest))) {
                Ok(()) => {
                    index.remove(&digest);
                    Counters::add(&self.counters.evictions, 1);
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    index.remove(&digest);
                }
                Err(_) => {}
            }
        }
    }
}

/// The bytes of the segments `own` names, other than `except`.
fn own_bytes(index: &DiskIndex, own: &dyn Fn(&Fingerprint) -> bool, except: Fingerprint) -> u64 {
    (index.segments.iter())
        .filter(|(segment, _)| **segment != except && own(segment))
        .map(|(_, bytes)| bytes)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{key, one_record as segment};

    /// Threads writing at once, each finding room for its own segment alone, do not take the
    /// source's segments past the limit together.
    #[test]
    fn writes_at_once_stay_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let one = segment(key(0), &[7; 100]).len() as u64;
        let cache = DiskCache::open(dir.path())
            .unwrap()
            .with_limit_bytes(3 * one);
        let written: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|block| {
                    let cache = &cache;
                    scope.spawn(move || {
                        let bytes = segment(key(block), &[7; 100]);
                        cache.put_sparing(&key(block), &bytes, &|_| true).unwrap() as u64
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap())
                .sum()
        });
        let stats = cache.stats();
        assert_eq!(written, 3, "{stats:?}");
        assert_eq!(stats.disk_bytes, 3 * one, "{stats:?}");
        assert_eq!(stats.declined_writes, 5, "{stats:?}");
        assert_eq!(stats.evictions, 0, "{stats:?}");
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(
            files, 3,
            "what was declined after its write is gone from the disk"
        );
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
    fn a_failed_write_leaves_no_segment() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        // A directory where the segment should go: the rename into place fails.
        let blocked = cache.segment_path(&key(1));
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), b"x").unwrap();
        let error = cache.put(&key(1), &segment(key(1), b"x")).unwrap_err();
        assert!(error.to_string().contains("renaming into place"), "{error}");
        // The failed write is invisible: no segment, a plain miss, nothing counted as stored.
        assert!(!cache.contains(&key(1)));
        assert_eq!(cache.stats().disk_bytes, 0);
        assert_eq!(cache.stats().corrupt_segments, 0);
        // Once the way is clear a write succeeds, and a reopened cache finds only it.
        std::fs::remove_dir_all(&blocked).unwrap();
        cache.put(&key(1), &segment(key(1), b"x")).unwrap();
        let reopened = DiskCache::open(dir.path()).unwrap();
        assert_eq!(reopened.get(&key(1)).unwrap().unwrap().record(0), b"x");
        assert_eq!(reopened.stats().disk_bytes, cache.stats().disk_bytes);
    }

    #[test]
    fn removing_forgets_the_segment() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        cache.put(&key(0), &segment(key(0), b"x")).unwrap();
        assert!(cache.remove(&key(0)).unwrap());
        assert!(!cache.remove(&key(0)).unwrap());
        assert!(!cache.contains(&key(0)));
        assert_eq!(cache.stats().disk_bytes, 0);
    }

    /// A cache in `dir` limited to two segments of one size, holding blocks 0 and 1; with that
    /// size.
    fn two_segments_at_the_limit(dir: &tempfile::TempDir) -> (DiskCache, u64) {
        let one = segment(key(0), &[7; 100]).len() as u64;
        let cache = DiskCache::open(dir.path())
            .unwrap()
            .with_limit_bytes(2 * one);
        for block in 0..2 {
            cache
                .put(&key(block), &segment(key(block), &[7; 100]))
                .unwrap();
        }
        (cache, one)
    }

    #[test]
    fn the_size_limit_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, one) = two_segments_at_the_limit(&dir);
        // Touch block 0 so block 1 is the least recently used.
        assert!(cache.get(&key(0)).unwrap().is_some());
        cache.put(&key(2), &segment(key(2), &[7; 100])).unwrap();
        assert!(cache.contains(&key(0)));
        assert!(!cache.contains(&key(1)));
        assert!(cache.contains(&key(2)));
        assert_eq!(cache.stats().evictions, 1);
        assert_eq!(cache.stats().disk_bytes, 2 * one);
    }

    /// A segment another process removed first is no longer counted, and is not this cache's
    /// eviction.
    #[test]
    fn a_segment_removed_by_another_process_is_not_counted_as_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, one) = two_segments_at_the_limit(&dir);
        // Another process (another kiln sharing the directory) evicts block 0.
        std::fs::remove_file(cache.segment_path(&key(0))).unwrap();
        cache.put(&key(2), &segment(key(2), &[7; 100])).unwrap();
        let stats = cache.stats();
        assert_eq!(stats.evictions, 0, "{stats:?}");
        assert_eq!(stats.disk_bytes, 2 * one, "{stats:?}");
        assert!(cache.contains(&key(1)) && cache.contains(&key(2)));
    }

    #[test]
    fn a_segment_that_will_not_delete_stays_counted() {
        let dir = tempfile::tempdir().unwrap();
        let one = segment(key(0), &[7; 100]).len() as u64;
        let cache = DiskCache::open(dir.path()).unwrap().with_limit_bytes(one);
        cache.put(&key(0), &segment(key(0), &[7; 100])).unwrap();
        // Something no unlink removes (a non-empty directory) where segment 0's file was.
        let path = cache.segment_path(&key(0));
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        cache.put(&key(1), &segment(key(1), &[7; 100])).unwrap();
        assert_eq!(cache.stats().evictions, 0);
        assert_eq!(
            cache.stats().disk_bytes,
            2 * one,
            "segment 0 is still on disk"
        );
        assert!(path.exists() && cache.contains(&key(1)));
        assert!(cache.remove(&key(0)).is_err());
        assert_eq!(
            cache.stats().disk_bytes,
            2 * one,
            "a failed removal forgets nothing"
        );
    }
}
