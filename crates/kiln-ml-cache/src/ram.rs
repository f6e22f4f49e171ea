//! A RAM tier over the disk cache: verified segments kept in memory under a byte budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kiln_ml_core::Fingerprint;
use lru::LruCache;

use crate::segment::Segment;

/// Verified segments held in memory, least recently used evicted first, never more than
/// `budget_bytes` in total.
///
/// It holds encoded segments rather than decoded samples: the byte count is then exact (no
/// guessing at the heap size of user types), a hit costs only the decode (no system call, no
/// page fault, no checksum: the bytes were verified when they came from disk), and sample types
/// need not be `Clone`.
#[derive(Debug)]
pub struct RamCache {
    budget_bytes: u64,
    inner: Mutex<RamInner>,
    hits: AtomicU64,
}

#[derive(Debug)]
struct RamInner {
    segments: LruCache<Fingerprint, Arc<Segment>>,
    bytes: u64,
}

impl RamCache {
    /// An empty RAM cache holding at most `budget_bytes` of segments.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            inner: Mutex::new(RamInner {
                segments: LruCache::unbounded(),
                bytes: 0,
            }),
            hits: AtomicU64::new(0),
        }
    }

    /// The budget.
    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Hits so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The segment stored under `digest`, marking it most recently used. A hit counts once it
    /// has decoded ([`count_hit`](Self::count_hit)).
    pub(crate) fn get(&self, digest: &Fingerprint) -> Option<Arc<Segment>> {
        self.lock().segments.get(digest).cloned()
    }

    /// Counts a hit: a segment from [`get`](Self::get) that decoded.
    pub(crate) fn count_hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets the segment stored under `digest` (one that did not decode).
    pub(crate) fn remove(&self, digest: &Fingerprint) {
        let mut inner = self.lock();
        if let Some(removed) = inner.segments.pop(digest) {
            inner.bytes -= removed.byte_len() as u64;
        }
    }

    /// Stores a segment read from disk (see [`insert`](Self::insert)): moved when it is on the
    /// heap already, copied when it is mapped; a segment larger than the whole budget is not
    /// copied.
    pub(crate) fn insert_from_disk(&self, digest: Fingerprint, segment: Segment) {
        if segment.byte_len() as u64 <= self.budget_bytes {
            self.insert(digest, segment.into_heap());
        }
    }

    /// Stores a heap segment, evicting least recently used segments to fit; a segment larger
    /// than the whole budget is not stored.
    pub(crate) fn insert(&self, digest: Fingerprint, segment: Segment) {
        let bytes = segment.byte_len() as u64;
        if bytes > self.budget_bytes {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.segments.put(digest, Arc::new(segment)) {
            inner.bytes -= old.byte_len() as u64;
        }
        inner.bytes += bytes;
        while inner.bytes > self.budget_bytes {
            match inner.segments.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.byte_len() as u64,
                None => break,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RamInner> {
        // Plain bookkeeping: a panic elsewhere cannot leave it inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::SegmentBytes;
    use crate::test_support::{key, one_record};

    fn segment(block: u32, payload_bytes: usize) -> (Fingerprint, Segment) {
        let bytes = one_record(key(block), &vec![1; payload_bytes]);
        let segment = Segment::verify(SegmentBytes::heap(&bytes), &key(block)).unwrap();
        (key(block).digest(), segment)
    }

    #[test]
    fn stays_within_its_budget() {
        let (_, probe) = segment(0, 100);
        let one = probe.byte_len() as u64;
        let cache = RamCache::new(2 * one);
        for block in 0..3 {
            let (digest, segment) = segment(block, 100);
            cache.insert_from_disk(digest, segment);
            assert!(cache.bytes() <= 2 * one);
        }
        assert!(
            cache.get(&segment(0, 100).0).is_none(),
            "the oldest was evicted"
        );
        assert!(cache.get(&segment(2, 100).0).is_some());
        cache.remove(&segment(2, 100).0);
        assert!(cache.get(&segment(2, 100).0).is_none());
        assert_eq!(cache.bytes(), one, "the removed segment's bytes are freed");
    }

    #[test]
    fn oversized_segments_are_not_kept() {
        let (digest, big) = segment(0, 1000);
        let cache = RamCache::new(10);
        cache.insert_from_disk(digest, big);
        assert_eq!(cache.bytes(), 0);
        assert!(cache.get(&digest).is_none());
    }
}
