//! Verifying a segment's every byte before it is used.

use super::bytes::SegmentBytes;
use super::format::{
    FORMAT_VERSION, HEADER_BYTES, INDEX_ENTRY_BYTES, MAGIC, align_up, checksum, read_fingerprint,
    read_u64, read_usize,
};
use super::key::SegmentKey;
use super::verified::Segment;

/// Damaged records named in one error, at most.
const NAMED_DAMAGED_RECORDS: usize = 8;

impl Segment {
    /// Checks magic, version, key, lengths, the layout of the records and the header, index
    /// and payload checksums; the reason when one fails.
    pub(crate) fn verify(bytes: SegmentBytes, key: &SegmentKey) -> Result<Self, String> {
        let data = bytes.as_slice();
        if data.len() < HEADER_BYTES {
            return Err(format!("{} bytes is shorter than the header", data.len()));
        }
        if data[0..8] != MAGIC {
            return Err("bad magic: not a kiln cache segment".to_owned());
        }
        // Before the header checksum, whose place may differ between versions.
        let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, expected {FORMAT_VERSION}"
            ));
        }
        if read_u64(data, 96) != checksum(&data[..96]) {
            return Err("header checksum mismatch".to_owned());
        }
        let found = SegmentKey {
            block: u32::from_le_bytes([data[12], data[13], data[14], data[15]]),
            layout: read_fingerprint(data, 16),
            transform: read_fingerprint(data, 32),
            codec: read_fingerprint(data, 48),
        };
        if &found != key {
            return Err(format!("the header holds key {found:?}, expected {key:?}"));
        }
        let records = read_usize(data, 64).ok_or("the record count overflows")?;
        let start = records
            .checked_mul(INDEX_ENTRY_BYTES)
            .and_then(|index| index.checked_add(HEADER_BYTES))
            .ok_or("the index overflows")?;
        let payload_bytes = read_usize(data, 72).ok_or("the payload size overflows")?;
        if start.checked_add(payload_bytes) != Some(data.len()) {
            return Err(format!(
                "{} bytes on disk but the header promises {}: truncated or padded",
                data.len(),
                start.saturating_add(payload_bytes)
            ));
        }
        let index = &data[HEADER_BYTES..start];
        if read_u64(data, 80) != checksum(index) {
            return Err("index checksum mismatch".to_owned());
        }
        // Records lie back to back, each aligned, with at most 7 bytes of padding between them.
        // With that layout checked, every byte of the file lies in the header, the index or the
        // payload, and each of those is hashed. The walk reads only the index: touching the
        // padding here would fault in payload pages before the hash streams through them.
        let mut end = 0;
        for (record, entry) in index.chunks_exact(INDEX_ENTRY_BYTES).enumerate() {
            let past = || format!("record {record} points past the payload");
            let offset = read_usize(entry, 0).ok_or_else(past)?;
            let len = read_usize(entry, 8).ok_or_else(past)?;
            if offset != align_up(end) {
                return Err(format!("record {record} is not where the layout puts it"));
            }
            end = offset
                .checked_add(len)
                .filter(|&record_end| record_end <= payload_bytes)
                .ok_or_else(past)?;
        }
        if end != payload_bytes {
            return Err(format!(
                "{} unused bytes after the last record",
                payload_bytes - end
            ));
        }
        let payload_checksum = read_u64(data, 88);
        let segment = Self { bytes, records };
        if payload_checksum != checksum(segment.payload()) {
            return Err(segment.name_damaged_records());
        }
        Ok(segment)
    }

    /// Why the payload checksum failed: the records whose own checksums no longer match.
    fn name_damaged_records(&self) -> String {
        let damaged: Vec<usize> = (0..self.records)
            .filter(|&record| {
                let (_, _, expected) = self.entry(record);
                checksum(self.record(record)) != expected
            })
            .collect();
        let named = || {
            let mut named: Vec<String> = damaged
                .iter()
                .take(NAMED_DAMAGED_RECORDS)
                .map(usize::to_string)
                .collect();
            if damaged.len() > NAMED_DAMAGED_RECORDS {
                named.push("...".to_owned());
            }
            named.join(", ")
        };
        match damaged.len() {
            // The damage lies in the padding between records, or in the payload checksum.
            0 => {
                "payload checksum mismatch, though every record matches its own checksum".to_owned()
            }
            1 => format!(
                "payload checksum mismatch: record {} is damaged",
                damaged[0]
            ),
            count => format!(
                "payload checksum mismatch: {count} of {} records are damaged ({})",
                self.records,
                named()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::format::payload_start;
    use crate::test_support::{build, key, open};

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = build(&[b"hello", b"", b"world!"]);
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(
                open(&damaged).is_err(),
                "a flip of byte {at} went unnoticed"
            );
        }
    }

    /// Recomputes the index, payload and header checksums after a deliberate edit, as a
    /// buggy writer or a crafted file would have them: only the layout checks stand.
    fn reseal(bytes: &mut [u8]) {
        let records = read_u64(bytes, 64) as usize;
        let start = records
            .saturating_mul(INDEX_ENTRY_BYTES)
            .saturating_add(HEADER_BYTES)
            .min(bytes.len());
        let index = checksum(&bytes[HEADER_BYTES..start]);
        let payload = checksum(&bytes[start..]);
        bytes[80..88].copy_from_slice(&index.to_le_bytes());
        bytes[88..96].copy_from_slice(&payload.to_le_bytes());
        let header = checksum(&bytes[..96]);
        bytes[96..104].copy_from_slice(&header.to_le_bytes());
    }

    fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn verify_sealed(mut bytes: Vec<u8>) -> Result<Segment, String> {
        reseal(&mut bytes);
        open(&bytes)
    }

    #[test]
    fn the_layout_walk_rejects_what_checksums_cannot() {
        let bytes = build(&[b"hello", b"", b"world!"]);
        assert!(verify_sealed(bytes.clone()).is_ok());
        let entry = |record: usize| HEADER_BYTES + record * INDEX_ENTRY_BYTES;
        // (what verification must say, where a u64 field is overwritten, with what)
        let cases = [
            ("record 1 is not where the layout puts it", entry(1), 16),
            ("record 2 points past the payload", entry(2) + 8, 9),
            ("record 0 points past the payload", entry(0) + 8, u64::MAX),
            ("2 unused bytes after the last record", entry(2) + 8, 4),
            ("truncated or padded", 72, u64::MAX),
            ("the index overflows", 64, u64::MAX / 2),
        ];
        for (expected, at, value) in cases {
            let mut damaged = bytes.clone();
            write_u64(&mut damaged, at, value);
            let error = verify_sealed(damaged).err();
            assert!(
                error
                    .as_deref()
                    .is_some_and(|error| error.contains(expected)),
                "expected {expected:?}, got {error:?}"
            );
        }
        let mut other_version = bytes.clone();
        other_version[8] = 1;
        let error = open(&other_version).unwrap_err();
        assert_eq!(error, "format version 1, expected 2");
    }

    proptest::proptest! {
        #[test]
        fn crafted_segments_never_panic(
            edits in proptest::collection::vec(
                (proptest::num::usize::ANY, proptest::num::u8::ANY),
                1..6,
            ),
            reseal_them in proptest::bool::ANY,
        ) {
            let original = build(&[b"hello", b"", b"world!", &[1; 17]]);
            let mut bytes = original.clone();
            // Anywhere in the file: header, index, records and padding.
            for (at, value) in edits {
                let at = at % bytes.len();
                bytes[at] = value;
            }
            if reseal_them {
                reseal(&mut bytes);
            } else if bytes != original {
                // The checksums cover every byte: no edit goes unnoticed.
                proptest::prop_assert!(open(&bytes).is_err());
            }
            let len = bytes.len();
            if let Ok(segment) = open(&bytes) {
                for record in 0..segment.len() {
                    let within = segment.record(record).len() <= len;
                    proptest::prop_assert!(within);
                }
            }
        }
    }

    #[test]
    fn damaged_records_are_named() {
        let records: [&[u8]; 4] = [b"zero", b"one", b"two", b"three"];
        let bytes = build(&records);
        let at = |record: usize| {
            let needle = records[record];
            bytes
                .windows(needle.len())
                .rposition(|window| window == needle)
                .unwrap()
        };
        let mut damaged = bytes.clone();
        damaged[at(1)] ^= 1;
        let error = open(&damaged).unwrap_err();
        assert_eq!(error, "payload checksum mismatch: record 1 is damaged");
        damaged[at(3) + 2] ^= 1;
        let error = open(&damaged).unwrap_err();
        assert_eq!(
            error,
            "payload checksum mismatch: 2 of 4 records are damaged (1, 3)"
        );
    }

    #[test]
    fn at_most_eight_damaged_records_are_listed() {
        let records: Vec<[u8; 8]> = (0..10u8).map(|record| [record; 8]).collect();
        let slices: Vec<&[u8]> = records.iter().map(|record| &record[..]).collect();
        let mut bytes = build(&slices);
        let payload = payload_start(records.len());
        for record in 0..10 {
            bytes[payload + 8 * record] ^= 0x80;
        }
        let error = open(&bytes).unwrap_err();
        assert_eq!(
            error,
            "payload checksum mismatch: 10 of 10 records are damaged (0, 1, 2, 3, 4, 5, 6, 7, ...)"
        );
    }

    #[test]
    fn a_damaged_payload_checksum_is_reported() {
        let bytes = build(&[b"abc"]);
        let mut damaged = bytes.clone();
        // The payload checksum lives at 88..96; fix the header checksum up so only it differs.
        damaged[88] ^= 1;
        let header_checksum = checksum(&damaged[..96]);
        damaged[96..104].copy_from_slice(&header_checksum.to_le_bytes());
        let error = open(&damaged).unwrap_err();
        assert_eq!(
            error,
            "payload checksum mismatch, though every record matches its own checksum"
        );
    }

    #[test]
    fn wrong_key_and_truncation_are_rejected() {
        let bytes = build(&[b"hello"]);
        let error = Segment::verify(SegmentBytes::heap(&bytes), &key(4)).unwrap_err();
        assert!(error.contains("expected"), "{error}");
        let error = open(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(error.contains("truncated"), "{error}");
    }
}
