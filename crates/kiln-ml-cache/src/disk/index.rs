//! The disk cache's bookkeeping: known segments in least-recently-used order, with their sizes.

use kiln_ml_core::Fingerprint;
use lru::LruCache;

/// Known segments in least-recently-used order, with their sizes.
#[derive(Debug)]
pub(super) struct DiskIndex {
    pub(super) segments: LruCache<Fingerprint, u64>,
    /// The sum of the sizes.
    pub(super) bytes: u64,
    /// Segments forgotten so far (evicted, removed, found corrupt or gone): room may have
    /// appeared since a write was declined when this count differs.
    pub(super) removals: u64,
}

impl DiskIndex {
    /// Segments found on disk as `(modified, digest, bytes)`, oldest use first.
    pub(super) fn from_found(mut found: Vec<(std::time::SystemTime, Fingerprint, u64)>) -> Self {
        found.sort();
        let mut index = Self {
            segments: LruCache::unbounded(),
            bytes: 0,
            removals: 0,
        };
        for (_, digest, bytes) in found {
            index.insert(digest, bytes);
        }
        index
    }

    /// Records a segment as the most recently used, replacing an older size.
    pub(super) fn insert(&mut self, digest: Fingerprint, bytes: u64) {
        if let Some(old) = self.segments.put(digest, bytes) {
            self.bytes -= old;
        }
        self.bytes += bytes;
    }

    /// Forgets a segment.
    pub(super) fn remove(&mut self, digest: &Fingerprint) {
        if let Some(old) = self.segments.pop(digest) {
            self.bytes -= old;
            self.removals += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn sizes_add_up_and_the_oldest_use_comes_first() {
        let [a, b] = [b"a", b"b"].map(|name| Fingerprint::of_bytes(name));
        let later = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut index = DiskIndex::from_found(vec![(later, a, 5), (SystemTime::UNIX_EPOCH, b, 7)]);
        assert_eq!(index.bytes, 12);
        assert_eq!(index.segments.peek_lru(), Some((&b, &7)));
        index.insert(b, 3);
        assert_eq!(
            (index.bytes, index.segments.peek_lru()),
            (8, Some((&a, &5)))
        );
        index.remove(&a);
        index.remove(&a);
        assert_eq!(index.bytes, 3);
    }
}
