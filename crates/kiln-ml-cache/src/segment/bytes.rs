//! Where a segment's bytes live: a memory map or the heap, always 8-byte aligned.

use memmap2::Mmap;

/// Where a segment's bytes live. Records stay 8-byte aligned in every variant, so
/// [`Segment::pod_record`](crate::Segment::pod_record) can view them in place.
#[derive(Debug)]
pub(crate) enum SegmentBytes {
    /// A read-only memory map of the segment file.
    Mapped(Mmap),
    /// Bytes read into (or copied onto) the heap, starting 8-byte aligned.
    Owned(Vec<u8>),
    /// Heap bytes kept as `u64`s, for the rare allocator that returned an unaligned buffer.
    Realigned { words: Vec<u64>, len: usize },
}

impl SegmentBytes {
    /// Takes `bytes` as they are when they start 8-byte aligned (every common allocator aligns
    /// buffers this large to at least 16), and copies them into aligned words otherwise. Spare
    /// capacity is released first (a buffer grown by doubling may hold twice its length), so
    /// the RAM tier's byte count is what the heap holds.
    pub(crate) fn owned(mut bytes: Vec<u8>) -> Self {
        bytes.shrink_to_fit();
        if bytes.as_ptr().cast::<u64>().is_aligned() {
            Self::Owned(bytes)
        } else {
            Self::realigned(&bytes)
        }
    }

    /// A copy of `bytes` in aligned words.
    fn realigned(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self::Realigned {
            words,
            len: bytes.len(),
        }
    }

    /// A heap copy of `bytes`.
    pub(crate) fn heap(bytes: &[u8]) -> Self {
        Self::owned(bytes.to_vec())
    }

    /// The bytes, wherever they live.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
            Self::Realigned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Segment;
    use crate::test_support::{build, key};

    #[test]
    fn unaligned_bytes_are_realigned() {
        let bytes = build(&[&[1, 0, 0, 0, 2, 0, 0, 0]]);
        // A Vec from the global allocator always starts aligned here, so the copy is exercised
        // directly, on bytes one past an aligned start.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        let realigned = SegmentBytes::realigned(&shifted[1..]);
        assert!(matches!(realigned, SegmentBytes::Realigned { .. }));
        assert!(matches!(
            SegmentBytes::owned(bytes.clone()),
            SegmentBytes::Owned(_)
        ));
        for candidate in [SegmentBytes::owned(bytes), realigned] {
            let segment = Segment::verify(candidate, &key(3)).unwrap();
            assert_eq!(segment.pod_record::<u32>(0), Some(&[1u32, 2][..]));
        }
    }

    #[test]
    fn owned_bytes_hold_no_spare_capacity() {
        // As a segment builder leaves them: a buffer grown past its length.
        let mut bytes = Vec::with_capacity(4096);
        bytes.extend_from_slice(&build(&[b"sample"]));
        let len = bytes.len();
        match SegmentBytes::owned(bytes) {
            SegmentBytes::Owned(kept) => assert!(kept.capacity() < 2 * len, "{}", kept.capacity()),
            SegmentBytes::Realigned { words, .. } => assert_eq!(words.capacity(), len.div_ceil(8)),
            SegmentBytes::Mapped(_) => unreachable!("heap bytes"),
        }
    }
}
