//! Reading a segment: mapped or read by size, verified before use, discarded when corrupt.

use std::fs::File;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use memmap2::MmapOptions;

use super::store::DiskCache;
use crate::segment::{Segment, SegmentBytes, SegmentKey};
use crate::stats::{CorruptSegment, Counters};
use crate::{Error, Result};

/// How many corruption reports are kept (the count in the statistics is exact).
const KEPT_REPORTS: usize = 64;

impl DiskCache {
    /// The verified segment of `key`: `Ok(None)` when there is none; an
    /// [`Error::CorruptSegment`] (after removing the file and recording a report) when it fails
    /// verification.
    pub fn get(&self, key: &SegmentKey) -> Result<Option<Segment>> {
        Ok(self.get_opened(key)?.map(|(segment, _)| segment))
    }

    /// [`get`](Self::get), with the metadata of the file the segment was read from: what
    /// [`discard_undecodable`](Self::discard_undecodable) needs to leave a segment rebuilt
    /// meanwhile in place.
    pub(crate) fn get_opened(
        &self,
        key: &SegmentKey,
    ) -> Result<Option<(Segment, std::fs::Metadata)>> {
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
        let opened = file
            .metadata()
            .map_err(|source| Error::io("inspecting", &path, source))?;
        let len = opened.len();
        if len == 0 {
            return Err(self.discard_read(key, &opened, "the file is empty".to_owned()));
        }
        let bytes = if len >= self.mmap_threshold {
            // SAFETY: a mapping is sound only while nobody modifies the file in place. kiln
            // never does: segments are created complete under a temporary name and renamed into
            // place, and replaced or evicted only by rename or unlink, which leave an existing
            // mapping's file intact. The map is read-only, and every byte is verified before
            // use. The cache directory must not be written by other programs (documented on
            // `DiskCache`).
            match unsafe { MmapOptions::new().map(&file) } {
                Ok(map) => SegmentBytes::Mapped(map),
                // Some file systems refuse shared maps (FUSE mounts of object stores, some
                // network file systems): such a segment is read as a small one is.
                Err(_) => read_whole(&file, len, &path)?,
            }
        } else {
            read_whole(&file, len, &path)?
        };
        match Segment::verify(bytes, key) {
            Ok(segment) => {
                Counters::add(&self.counters.disk_hits, 1);
                Counters::add(&self.counters.bytes_read, len);
                let known = self.lock_index().segments.get(&key.digest()).is_some();
                // Written by another process since we opened the directory: indexed if its
                // file is still the one read (an eviction may have deleted it meanwhile). The
                // check costs a `stat`, so only here, not on every hit.
                if !known && std::fs::metadata(&path).is_ok_and(|now| same_file(&opened, &now)) {
                    self.lock_index().insert(key.digest(), len);
                }
                let mut opened = opened;
                if self.limit_bytes.is_some() {
                    // The next run orders segments by modification time: make it the last use.
                    // Best effort (the file may be gone, or not ours to touch). Where files are
                    // told apart by length and modification time (not Unix), the file read is
                    // the touched one.
                    if file.set_modified(SystemTime::now()).is_ok() {
                        opened = file.metadata().unwrap_or(opened);
                    }
                }
                Ok(Some((segment, opened)))
            }
            Err(reason) => Err(self.discard_read(key, &opened, reason)),
        }
    }

    /// [`discard_corrupt`](Self::discard_corrupt) for the file `get` opened (`opened`, its
    /// metadata then): when another thread or process has meanwhile renamed a rebuilt segment
    /// into its place, that one is kept, and only the corruption of the copy read is recorded.
    fn discard_read(&self, key: &SegmentKey, opened: &std::fs::Metadata, reason: String) -> Error {
        let path = self.segment_path(key);
        let replaced = std::fs::metadata(&path).is_ok_and(|now| !same_file(opened, &now));
        if replaced {
            Counters::add(&self.counters.corrupt_segments, 1);
            Counters::add(&self.counters.misses, 1);
            return self.record_corruption(path, key, reason);
        }
        self.discard_corrupt(key, reason)
    }

    /// Removes the segment of `key`, counts and records the corruption, and returns the error.
    /// A segment that could not be deleted stays counted (it is still on disk), and the report
    /// says why it stays.
    pub(crate) fn discard_corrupt(&self, key: &SegmentKey, mut reason: String) -> Error {
        let path = self.segment_path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.lock_index().remove(&key.digest());
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                self.lock_index().remove(&key.digest());
            }
            Err(error) => reason.push_str(&format!("; it could not be removed: {error}")),
        }
        Counters::add(&self.counters.corrupt_segments, 1);
        Counters::add(&self.counters.misses, 1);
        self.record_corruption(path, key, reason)
    }

    /// Keeps a report of the corruption (the last few) and returns its error.
    fn record_corruption(
        &self,
        path: std::path::PathBuf,
        key: &SegmentKey,
        reason: String,
    ) -> Error {
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

    /// Like [`discard_read`](Self::discard_read) for a segment that passed verification (and
    /// was counted as a hit) but does not decode: when the file `get_opened` read (`opened`) has
    /// meanwhile been replaced by a rebuilt segment, that one is kept.
    pub(crate) fn discard_undecodable(
        &self,
        key: &SegmentKey,
        opened: &std::fs::Metadata,
        reason: String,
    ) -> Error {
        self.counters.disk_hits.fetch_sub(1, Ordering::Relaxed);
        self.discard_read(key, opened, reason)
    }
}

/// The whole of an open segment file of `len` bytes, read into memory.
fn read_whole(file: &File, len: u64, path: &std::path::Path) -> Result<SegmentBytes> {
    let capacity = usize::try_from(len).unwrap_or(usize::MAX);
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(capacity)
        .map_err(|error| Error::io("reading", path, std::io::Error::other(error)))?;
    let mut file = file;
    file.read_to_end(&mut buffer)
        .map_err(|source| Error::io("reading", path, source))?;
    Ok(SegmentBytes::owned(buffer))
}

/// Whether two metadata describe the same file (device and inode); without them (not Unix),
/// whether they agree in length and modification time.
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        a.len() == b.len() && a.modified().ok() == b.modified().ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::test_support::{key, one_record as segment};

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
            // Unmapped before the file is overwritten in place, which kiln itself never does.
            drop(found);
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
    fn a_segment_rebuilt_meanwhile_is_not_removed_with_the_corrupt_copy() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        let path = cache.segment_path(&key(3));
        std::fs::write(&path, b"damaged").unwrap();
        let opened = File::open(&path).unwrap().metadata().unwrap();
        // Another reader found the same damage first and renamed a rebuilt segment into place.
        cache.put(&key(3), &segment(key(3), b"rebuilt")).unwrap();
        let error = cache.discard_read(&key(3), &opened, "the copy read was damaged".to_owned());
        assert!(
            matches!(error, Error::CorruptSegment { block: 3, .. }),
            "{error}"
        );
        assert_eq!(cache.stats().corrupt_segments, 1);
        let kept = cache
            .get(&key(3))
            .unwrap()
            .expect("the rebuilt segment was removed");
        assert_eq!(kept.record(0), b"rebuilt");
        // The copy read is still the one named there: it goes.
        let opened = File::open(&path).unwrap().metadata().unwrap();
        cache.discard_read(&key(3), &opened, "damaged after all".to_owned());
        assert!(!path.exists());
    }

    #[test]
    fn an_undecodable_segment_rebuilt_meanwhile_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path()).unwrap();
        cache.put(&key(4), &segment(key(4), b"old format")).unwrap();
        let (_, opened) = cache.get_opened(&key(4)).unwrap().unwrap();
        // Another process found it undecodable first and renamed a rebuilt segment into place.
        cache.put(&key(4), &segment(key(4), b"new format")).unwrap();
        cache.discard_undecodable(&key(4), &opened, "record 0 does not decode".to_owned());
        let kept = cache
            .get(&key(4))
            .unwrap()
            .expect("the rebuilt segment was removed");
        assert_eq!(kept.record(0), b"new format");
        // The file read is still the one there: it goes.
        let (_, opened) = cache.get_opened(&key(4)).unwrap().unwrap();
        cache.discard_undecodable(&key(4), &opened, "does not decode either".to_owned());
        assert!(cache.get(&key(4)).unwrap().is_none());
        assert_eq!(cache.stats().corrupt_segments, 2);
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
}
