//! A verified segment: its records, viewed in place.

use bytemuck::Pod;

use super::bytes::SegmentBytes;
use super::format::{HEADER_BYTES, INDEX_ENTRY_BYTES, payload_start, read_u64};

/// A verified segment: every checksum matched when it was opened.
#[derive(Debug)]
pub struct Segment {
    pub(super) bytes: SegmentBytes,
    pub(super) records: usize,
}

impl Segment {
    /// Offset, length and checksum of a record; the values fit `usize` once verified.
    pub(super) fn entry(&self, record: usize) -> (usize, usize, u64) {
        let data = self.bytes.as_slice();
        let at = HEADER_BYTES + record * INDEX_ENTRY_BYTES;
        (
            read_u64(data, at) as usize,
            read_u64(data, at + 8) as usize,
            read_u64(data, at + 16),
        )
    }

    /// The records, back to back with their alignment padding.
    pub(super) fn payload(&self) -> &[u8] {
        &self.bytes.as_slice()[payload_start(self.records)..]
    }

    /// Number of records (samples).
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether the segment holds no records.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Size of the whole segment in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.as_slice().len()
    }

    /// The encoded bytes of one record (verified when the segment was opened).
    ///
    /// # Panics
    /// When `record >= self.len()`.
    pub fn record(&self, record: usize) -> &[u8] {
        assert!(
            record < self.records,
            "record {record} of a segment of {} records",
            self.records
        );
        let (offset, len, _) = self.entry(record);
        &self.payload()[offset..offset + len]
    }

    /// One record viewed in place as a slice of plain numbers, with no copy: for records written
    /// by [`PodCodec`](crate::PodCodec). `None` when the length or alignment does not fit `P`.
    pub fn pod_record<P: Pod>(&self, record: usize) -> Option<&[P]> {
        bytemuck::try_cast_slice(self.record(record)).ok()
    }

    /// The segment on the heap, for the RAM cache: bytes already there move, mapped ones are
    /// copied.
    pub(crate) fn into_heap(self) -> Self {
        match self.bytes {
            SegmentBytes::Mapped(map) => Self {
                bytes: SegmentBytes::heap(&map),
                records: self.records,
            },
            owned => Self {
                bytes: owned,
                records: self.records,
            },
        }
    }

    /// Whether the bytes are a memory map of the file.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.bytes, SegmentBytes::Mapped(_))
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{build, open};

    #[test]
    fn records_round_trip_aligned() {
        let bytes = build(&[b"abc", b"", &[1, 0, 0, 0, 2, 0, 0, 0]]);
        let segment = open(&bytes).unwrap();
        assert_eq!(segment.len(), 3);
        assert!(!segment.is_empty());
        assert_eq!(segment.record(0), b"abc");
        assert_eq!(segment.record(1), b"");
        assert_eq!(segment.pod_record::<u32>(2), Some(&[1u32, 2][..]));
        assert_eq!(segment.byte_len(), bytes.len());
        let heap = segment.into_heap();
        assert!(!heap.is_mapped());
        assert_eq!(heap.record(0), b"abc");
    }

    #[test]
    #[should_panic(expected = "record 1 of a segment of 1 records")]
    fn a_record_past_the_end_panics() {
        let segment = open(&build(&[b"a"])).unwrap();
        let _ = segment.record(1);
    }
}
