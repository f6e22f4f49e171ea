//! Cache statistics: hits, misses, bytes moved, corruption and evictions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use kiln_ml_core::BlockIndex;

/// A snapshot of a cache's counters since it was opened.
///
/// Non-exhaustive so counters can be added; fields missing from serialized stats read as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CacheStats {
    /// Blocks served from the RAM cache.
    pub ram_hits: u64,
    /// Blocks served from disk segments.
    pub disk_hits: u64,
    /// Blocks that had to be computed (no segment, or a corrupt one).
    pub misses: u64,
    /// Segments that failed verification and were removed to be rebuilt.
    pub corrupt_segments: u64,
    /// Segment bytes read from disk (read or memory-mapped, and verified).
    pub bytes_read: u64,
    /// Segment bytes written to disk.
    pub bytes_written: u64,
    /// Segments that could not be written while serving reads (a full disk, a directory that
    /// went away): their samples were served without being written to disk. See
    /// [`DiskCache::last_write_error`](crate::DiskCache::last_write_error).
    pub failed_writes: u64,
    /// Segments removed to stay under the size limit.
    pub evictions: u64,
    /// Segments not written under the size limit: the same cached source's segments already
    /// filled it, or the segment alone is larger. Their blocks are computed again when read.
    pub declined_writes: u64,
    /// Bytes held by the RAM cache now.
    pub ram_bytes: u64,
    /// Bytes of segments on disk now, as far as this process knows.
    pub disk_bytes: u64,
}

impl CacheStats {
    /// Hits (RAM and disk) over all lookups; `None` before the first lookup.
    pub fn hit_rate(&self) -> Option<f64> {
        let hits = self.ram_hits + self.disk_hits;
        let lookups = hits + self.misses;
        (lookups > 0).then(|| hits as f64 / lookups as f64)
    }
}

/// A segment that failed verification: reported, removed and rebuilt, never served.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CorruptSegment {
    /// The segment file.
    pub path: PathBuf,
    /// The block it cached.
    pub block: BlockIndex,
    /// What failed.
    pub reason: String,
}

/// Lock-free counters behind [`CacheStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) disk_hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) corrupt_segments: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) failed_writes: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) declined_writes: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CacheStats {
            ram_hits: 0, // counted by the RAM tier, see `Cached::stats`
            disk_hits: load(&self.disk_hits),
            misses: load(&self.misses),
            corrupt_segments: load(&self.corrupt_segments),
            bytes_read: load(&self.bytes_read),
            bytes_written: load(&self.bytes_written),
            failed_writes: load(&self.failed_writes),
            evictions: load(&self.evictions),
            declined_writes: load(&self.declined_writes),
            ram_bytes: 0,
            disk_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_rate_counts_both_tiers() {
        assert_eq!(CacheStats::default().hit_rate(), None);
        let stats = CacheStats {
            ram_hits: 1,
            disk_hits: 2,
            misses: 1,
            ..CacheStats::default()
        };
        assert_eq!(stats.hit_rate(), Some(0.75));
    }

    #[test]
    fn counters_missing_from_older_stats_read_as_zero() {
        let stats: CacheStats = serde_json::from_str(r#"{"disk_hits": 3}"#).unwrap();
        assert_eq!((stats.disk_hits, stats.failed_writes), (3, 0));
    }
}
