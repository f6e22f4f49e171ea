//! The cache segment format: one file per source block, verified on every read.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "KILNSEG\0"
//!      8     4  format version (u32 LE)
//!     12     4  block index (u32 LE)
//!     16    16  layout fingerprint
//!     32    16  transform fingerprint
//!     48    16  codec fingerprint
//!     64     8  record count n (u64 LE)
//!     72     8  payload bytes (u64 LE)
//!     80     8  XXH3-64 of the index
//!     88     8  XXH3-64 of the payload
//!     96     8  XXH3-64 of bytes 0..96
//!    104  24·n  index: per record offset (from the payload start), length, XXH3-64 of the bytes
//! 104+24·n      payload: the records back to back, each starting 8-byte aligned, with zero
//!               padding between them
//! ```
//!
//! A read verifies every byte: the header, the index and the payload by their checksums (one
//! XXH3-64 over the whole payload), and the layout of the records by walking the index. One
//! long hash runs at about twice the speed of a thousand short ones (it is SIMD-bound rather
//! than call-bound), which is what keeps verified reads close to page-cache speed. The
//! per-record checksums are not checked when the payload checksum matches; they name the
//! damaged records when it does not.

use bytemuck::Pod;
use kiln_core::{BlockIndex, Fingerprint};
use memmap2::Mmap;

/// Version of the byte layout above; part of every key, so a new layout never reads old files.
pub const FORMAT_VERSION: u32 = 2;

const MAGIC: [u8; 8] = *b"KILNSEG\0";
const HEADER_BYTES: usize = 104;
const INDEX_ENTRY_BYTES: usize = 24;
const ALIGN: usize = 8;
// The payload then starts aligned right after the index, with no padding to verify.
const _: () =
    assert!(HEADER_BYTES.is_multiple_of(ALIGN) && INDEX_ENTRY_BYTES.is_multiple_of(ALIGN));

/// Damaged records named in one error, at most.
const NAMED_DAMAGED_RECORDS: usize = 8;

/// Everything a segment's content depends on: the source layout (files, sizes, modification
/// times, projection), the block, the transform and the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentKey {
    /// Fingerprint of the source layout.
    pub layout: Fingerprint,
    /// The block.
    pub block: BlockIndex,
    /// Fingerprint of the transform.
    pub transform: Fingerprint,
    /// Fingerprint of the codec.
    pub codec: Fingerprint,
}

impl SegmentKey {
    /// One fingerprint of the whole key and the format version: the segment's file name.
    pub fn digest(&self) -> Fingerprint {
        Fingerprint::builder()
            .str("kiln-data segment")
            .u64(u64::from(FORMAT_VERSION))
            .fingerprint(self.layout)
            .u64(u64::from(self.block))
            .fingerprint(self.transform)
            .fingerprint(self.codec)
            .finish()
    }

    /// The segment's file name inside the cache directory.
    pub fn file_name(&self) -> String {
        file_name(self.digest())
    }
}

/// The file name of the segment with this digest: `<digest>.v<FORMAT_VERSION>.seg`.
pub(crate) fn file_name(digest: Fingerprint) -> String {
    format!("{digest}.v{FORMAT_VERSION}.seg")
}

/// What a file name in a cache directory says about the file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SegmentName {
    /// A segment of this format version.
    Current(Fingerprint),
    /// A segment of an older format version (version 1 names carry no version).
    OlderVersion,
    /// A segment of a newer format version, written by a newer kiln.
    NewerVersion,
    /// Not a segment's name.
    Foreign,
}

impl SegmentName {
    pub(crate) fn parse(name: &str) -> Self {
        let Some(stem) = name.strip_suffix(".seg") else {
            return Self::Foreign;
        };
        let (digest, version) = match stem.split_once(".v") {
            Some((digest, version)) => (digest, version.parse::<u32>().ok()),
            None => (stem, Some(1)),
        };
        match (digest.parse::<Fingerprint>(), version) {
            (Ok(digest), Some(FORMAT_VERSION)) => Self::Current(digest),
            (Ok(_), Some(version)) if version < FORMAT_VERSION => Self::OlderVersion,
            (Ok(_), Some(_)) => Self::NewerVersion,
            _ => Self::Foreign,
        }
    }
}

/// XXH3-64, as every checksum of the format. Two implementations of the same function, for
/// speed: twox-hash picks AVX2 at run time, so a portable build hashes at AVX2 speed where the
/// CPU has it; xxhash-rust picks its SIMD at compile time, and is about twice as fast when the
/// build targets AVX-512 (`-C target-cpu=native` on such a CPU).
fn checksum(bytes: &[u8]) -> u64 {
    #[cfg(target_feature = "avx512f")]
    return xxhash_rust::xxh3::xxh3_64(bytes);
    #[cfg(not(target_feature = "avx512f"))]
    return twox_hash::XxHash3_64::oneshot(bytes);
}

fn align_up(value: usize) -> usize {
    value.div_ceil(ALIGN) * ALIGN
}

fn payload_start(records: usize) -> usize {
    HEADER_BYTES + INDEX_ENTRY_BYTES * records
}

/// Builds a segment in one buffer: room for the header and index is reserved up front so the
/// records are encoded straight into place, with no copy at the end.
#[derive(Debug)]
pub struct SegmentBuilder {
    key: SegmentKey,
    records: usize,
    index: Vec<(u64, u64, u64)>,
    buffer: Vec<u8>,
}

impl SegmentBuilder {
    /// A builder for a segment of exactly `records` records.
    pub fn new(key: SegmentKey, records: usize) -> Self {
        let start = payload_start(records);
        Self {
            key,
            records,
            index: Vec::with_capacity(records),
            buffer: vec![0; start],
        }
    }

    /// Appends one record written by `encode`, which gets the buffer to append to.
    pub fn push<E>(&mut self, encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<(), E> {
        let aligned = align_up(self.buffer.len());
        self.buffer.resize(aligned, 0);
        let result = encode(&mut self.buffer);
        if result.is_err() {
            self.buffer.truncate(aligned);
            return result;
        }
        let record = &self.buffer[aligned..];
        let offset = (aligned - payload_start(self.records)) as u64;
        self.index
            .push((offset, record.len() as u64, checksum(record)));
        Ok(())
    }

    /// The finished segment bytes; `None` when the record count differs from the promise.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        if self.index.len() != self.records {
            return None;
        }
        let start = payload_start(self.records);
        let payload_bytes = (self.buffer.len() - start) as u64;
        let mut index = Vec::with_capacity(INDEX_ENTRY_BYTES * self.records);
        for (offset, len, checksum) in &self.index {
            index.extend_from_slice(&offset.to_le_bytes());
            index.extend_from_slice(&len.to_le_bytes());
            index.extend_from_slice(&checksum.to_le_bytes());
        }
        let header = &mut self.buffer[..HEADER_BYTES];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&self.key.block.to_le_bytes());
        header[16..32].copy_from_slice(&self.key.layout.to_le_bytes());
        header[32..48].copy_from_slice(&self.key.transform.to_le_bytes());
        header[48..64].copy_from_slice(&self.key.codec.to_le_bytes());
        header[64..72].copy_from_slice(&(self.records as u64).to_le_bytes());
        header[72..80].copy_from_slice(&payload_bytes.to_le_bytes());
        header[80..88].copy_from_slice(&checksum(&index).to_le_bytes());
        self.buffer[HEADER_BYTES..HEADER_BYTES + index.len()].copy_from_slice(&index);
        let payload_checksum = checksum(&self.buffer[start..]);
        let header = &mut self.buffer[..HEADER_BYTES];
        header[88..96].copy_from_slice(&payload_checksum.to_le_bytes());
        let header_checksum = checksum(&header[..96]);
        header[96..104].copy_from_slice(&header_checksum.to_le_bytes());
        Some(self.buffer)
    }
}

/// Where a segment's bytes live. Records stay 8-byte aligned in every variant, so
/// [`Segment::pod_record`] can view them in place.
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
    /// buffers this large to at least 16), and copies them into aligned words otherwise.
    pub(crate) fn owned(bytes: Vec<u8>) -> Self {
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

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
            Self::Realigned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }
}

/// A verified segment: every checksum matched when it was opened.
#[derive(Debug)]
pub struct Segment {
    bytes: SegmentBytes,
    records: usize,
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// A `u64` field that must fit `usize` (it always does on 64-bit targets).
fn read_usize(bytes: &[u8], at: usize) -> Option<usize> {
    usize::try_from(read_u64(bytes, at)).ok()
}

fn read_fingerprint(bytes: &[u8], at: usize) -> Fingerprint {
    let mut word = [0; 16];
    word.copy_from_slice(&bytes[at..at + 16]);
    Fingerprint::from_le_bytes(word)
}

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

    /// Offset, length and checksum of a record; the values fit `usize` once verified.
    fn entry(&self, record: usize) -> (usize, usize, u64) {
        let data = self.bytes.as_slice();
        let at = HEADER_BYTES + record * INDEX_ENTRY_BYTES;
        (
            read_u64(data, at) as usize,
            read_u64(data, at + 8) as usize,
            read_u64(data, at + 16),
        )
    }

    fn payload(&self) -> &[u8] {
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
    use super::*;

    fn key(block: BlockIndex) -> SegmentKey {
        SegmentKey {
            layout: Fingerprint::of_bytes(b"layout"),
            block,
            transform: Fingerprint::of_bytes(b"transform"),
            codec: Fingerprint::of_bytes(b"codec"),
        }
    }

    fn build(records: &[&[u8]]) -> Vec<u8> {
        let mut builder = SegmentBuilder::new(key(3), records.len());
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

    #[test]
    fn both_checksum_implementations_agree() {
        // `checksum` switches implementation with the build's target features; segments written
        // by one build must verify in the other.
        for len in [0, 1, 16, 17, 128, 129, 240, 241, 1024, 1025, 100_000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            assert_eq!(
                twox_hash::XxHash3_64::oneshot(&bytes),
                xxhash_rust::xxh3::xxh3_64(&bytes),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn records_round_trip_aligned() {
        let bytes = build(&[b"abc", b"", &[1, 0, 0, 0, 2, 0, 0, 0]]);
        let segment = Segment::verify(SegmentBytes::heap(&bytes), &key(3)).unwrap();
        assert_eq!(segment.len(), 3);
        assert_eq!(segment.record(0), b"abc");
        assert_eq!(segment.record(1), b"");
        assert_eq!(segment.pod_record::<u32>(2), Some(&[1u32, 2][..]));
        assert_eq!(segment.byte_len(), bytes.len());
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = build(&[b"hello", b"", b"world!"]);
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let verdict = Segment::verify(SegmentBytes::heap(&damaged), &key(3));
            assert!(verdict.is_err(), "a flip of byte {at} went unnoticed");
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
        Segment::verify(SegmentBytes::heap(&bytes), &key(3))
    }

    #[test]
    fn checksums_are_xxh3_64() {
        // The published XXH3-64 of no bytes, and a pinned value for an input of many stripes,
        // whichever implementation this build uses.
        assert_eq!(checksum(b""), 0x2D06_8005_38D3_94C2);
        let long: Vec<u8> = (0..100_000u32).map(|i| (i * 131 % 251) as u8).collect();
        assert_eq!(checksum(&long), xxhash_rust::xxh3::xxh3_64(&long));
        assert_eq!(checksum(&long), twox_hash::XxHash3_64::oneshot(&long));
        assert_eq!(checksum(&long), 0xE870_C3DB_450B_9247);
    }

    #[test]
    fn the_byte_format_is_pinned() {
        // Changing any byte of the format must come with a new FORMAT_VERSION.
        let bytes = build(&[b"abc", b"", &[7; 9]]);
        assert_eq!(bytes.len(), 104 + 3 * 24 + 8 + 9);
        assert_eq!(&bytes[..12], b"KILNSEG\0\x02\0\0\0");
        assert_eq!(Fingerprint::of_bytes(&bytes).to_string(), GOLDEN_SEGMENT);
    }

    const GOLDEN_SEGMENT: &str = "7e5bb0065b7b4dd93fc09bbd1bd43a6e";

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
        let error = Segment::verify(SegmentBytes::heap(&other_version), &key(3)).unwrap_err();
        assert_eq!(error, "format version 1, expected 2");
    }

    proptest::proptest! {
        #[test]
        fn crafted_segments_never_panic(
            edits in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 1..6),
            reseal_them in proptest::bool::ANY,
        ) {
            let mut bytes = build(&[b"hello", b"", b"world!", &[1; 17]]);
            for (at, value) in edits {
                let at = at % bytes.len();
                bytes[at] = value;
            }
            if reseal_them {
                reseal(&mut bytes);
            }
            let len = bytes.len();
            if let Ok(segment) = Segment::verify(SegmentBytes::heap(&bytes), &key(3)) {
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
        let error = Segment::verify(SegmentBytes::heap(&damaged), &key(3)).unwrap_err();
        assert_eq!(error, "payload checksum mismatch: record 1 is damaged");
        damaged[at(3) + 2] ^= 1;
        let error = Segment::verify(SegmentBytes::heap(&damaged), &key(3)).unwrap_err();
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
        let error = Segment::verify(SegmentBytes::heap(&bytes), &key(3)).unwrap_err();
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
        let error = Segment::verify(SegmentBytes::heap(&damaged), &key(3)).unwrap_err();
        assert_eq!(
            error,
            "payload checksum mismatch, though every record matches its own checksum"
        );
    }

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
    #[should_panic(expected = "record 1 of a segment of 1 records")]
    fn a_record_past_the_end_panics() {
        let segment = Segment::verify(SegmentBytes::heap(&build(&[b"a"])), &key(3)).unwrap();
        let _ = segment.record(1);
    }

    #[test]
    fn file_names_carry_the_format_version() {
        let digest = key(3).digest();
        let name = key(3).file_name();
        assert_eq!(name, format!("{digest}.v{FORMAT_VERSION}.seg"));
        assert_eq!(SegmentName::parse(&name), SegmentName::Current(digest));
        assert_eq!(
            SegmentName::parse(&format!("{digest}.seg")),
            SegmentName::OlderVersion
        );
        assert_eq!(
            SegmentName::parse(&format!("{digest}.v1.seg")),
            SegmentName::OlderVersion
        );
        assert_eq!(
            SegmentName::parse(&format!("{digest}.v3.seg")),
            SegmentName::NewerVersion
        );
        for foreign in ["notes.seg", "x.v2.seg", &format!("{digest}.v2.tmp"), ".seg"] {
            assert_eq!(
                SegmentName::parse(foreign),
                SegmentName::Foreign,
                "{foreign}"
            );
        }
    }

    #[test]
    fn wrong_key_and_truncation_are_rejected() {
        let bytes = build(&[b"hello"]);
        let error = Segment::verify(SegmentBytes::heap(&bytes), &key(4)).unwrap_err();
        assert!(error.contains("expected"), "{error}");
        let error =
            Segment::verify(SegmentBytes::heap(&bytes[..bytes.len() - 1]), &key(3)).unwrap_err();
        assert!(error.contains("truncated"), "{error}");
    }

    #[test]
    fn a_short_count_does_not_finish() {
        let builder = SegmentBuilder::new(key(0), 2);
        assert!(builder.finish().is_none());
    }
}
