//! Fixtures shared by the unit tests: segment keys and segments built from plain bytes.

use kiln_ml_core::{BlockIndex, Fingerprint};

use crate::Segment;
use crate::segment::{SegmentBuilder, SegmentBytes, SegmentKey};

/// The key every unit test's segments use, for `block`.
pub(crate) fn key(block: BlockIndex) -> SegmentKey {
    SegmentKey {
        layout: Fingerprint::of_bytes(b"layout"),
        block,
        transform: Fingerprint::of_bytes(b"transform"),
        codec: Fingerprint::of_bytes(b"codec"),
    }
}

/// The bytes of a segment of `key` holding `records`.
pub(crate) fn segment_bytes(key: SegmentKey, records: &[&[u8]]) -> Vec<u8> {
    let mut builder = SegmentBuilder::new(key, records.len());
    for record in records {
        builder
            .push(|out| {
                out.extend_from_slice(record);
                Ok::<_, ()>(())
            })
            .unwrap();
    }
    builder.finish().unwrap()
}

/// The bytes of a segment of block 3 holding `records`.
pub(crate) fn build(records: &[&[u8]]) -> Vec<u8> {
    segment_bytes(key(3), records)
}

/// `bytes` verified (from a heap copy) as a segment of block 3.
pub(crate) fn open(bytes: &[u8]) -> Result<Segment, String> {
    Segment::verify(SegmentBytes::heap(bytes), &key(3))
}

/// The bytes of a segment of `key` holding the one record `payload`.
pub(crate) fn one_record(key: SegmentKey, payload: &[u8]) -> Vec<u8> {
    segment_bytes(key, &[payload])
}
