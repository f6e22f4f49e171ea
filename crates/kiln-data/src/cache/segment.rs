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
//!      …        zero padding to a multiple of 8, then the payload: records, each 8-byte aligned
//! ```
//!
//! A read verifies every byte: the header and index by their checksums, the payload by one
//! XXH3-64 over all of it. One long hash runs at about twice the speed of a thousand short
//! ones (it is SIMD-bound rather than call-bound), which is what keeps verified reads close to
//! page-cache speed. The per-record checksums are consulted only when the payload checksum
//! fails, to name the damaged records.

use bytemuck::Pod;
use kiln_core::{BlockIndex, Fingerprint};
use memmap2::Mmap;

/// Version of the byte layout above; part of every key, so a new layout never reads old files.
pub const FORMAT_VERSION: u32 = 2;

const MAGIC: [u8; 8] = *b"KILNSEG\0";
const HEADER_BYTES: usize = 104;
/// Damaged records named in one error, at most.
const NAMED_DAMAGED_RECORDS: usize = 8;
const INDEX_ENTRY_BYTES: usize = 24;
const ALIGN: usize = 8;

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
        format!("{}.seg", self.digest())
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
    align_up(HEADER_BYTES + INDEX_ENTRY_BYTES * records)
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

fn read_fingerprint(bytes: &[u8], at: usize) -> Fingerprint {
    let mut word = [0; 16];
    word.copy_from_slice(&bytes[at..at + 16]);
    Fingerprint::from_le_bytes(word)
}

impl Segment {
    /// Checks magic, version, key, lengths, the layout of the records and every checksum; the
    /// reason when one fails.
    pub(crate) fn verify(bytes: SegmentBytes, key: &SegmentKey) -> Result<Self, String> {
        let data = bytes.as_slice();
        if data.len() < HEADER_BYTES {
            return Err(format!("{} bytes is shorter than the header", data.len()));
        }
        if data[0..8] != MAGIC {
            return Err("bad magic: not a kiln cache segment".to_owned());
        }
        if read_u64(data, 96) != checksum(&data[..96]) {
            return Err("header checksum mismatch".to_owned());
        }
        let version = u32::from_le_bytes([data[8], data[9], data[10], data[11]]);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, expected {FORMAT_VERSION}"
            ));
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
        let records =
            usize::try_from(read_u64(data, 64)).map_err(|_| "record count overflows".to_owned())?;
        let start = HEADER_BYTES
            .checked_add(
                records
                    .checked_mul(INDEX_ENTRY_BYTES)
                    .ok_or("index overflows")?,
            )
            .map(align_up)
            .ok_or("index overflows")?;
        let payload_bytes = read_u64(data, 72) as usize;
        if start.checked_add(payload_bytes) != Some(data.len()) {
            return Err(format!(
                "{} bytes on disk but the header promises {}: truncated or padded",
                data.len(),
                start.saturating_add(payload_bytes)
            ));
        }
        let index = &data[HEADER_BYTES..HEADER_BYTES + records * INDEX_ENTRY_BYTES];
        if read_u64(data, 80) != checksum(index) {
            return Err("index checksum mismatch".to_owned());
        }
        if data[HEADER_BYTES + index.len()..start]
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err("non-zero padding after the index".to_owned());
        }
        // Records lie back to back, each aligned, with at most 7 bytes of padding between them.
        // With that layout checked, every byte of the file lies in the header, the index or the
        // payload, and each of those is hashed. The walk reads only the index: touching the
        // padding here would fault in payload pages before the hash streams through them.
        let mut end = 0;
        for (record, entry) in index.chunks_exact(INDEX_ENTRY_BYTES).enumerate() {
            let offset = read_u64(entry, 0) as usize;
            let len = read_u64(entry, 8) as usize;
            if offset != align_up(end) {
                return Err(format!("record {record} is not where the layout puts it"));
            }
            end = offset
                .checked_add(len)
                .filter(|&record_end| record_end <= payload_bytes)
                .ok_or_else(|| format!("record {record} points past the payload"))?;
        }
        if end != payload_bytes {
            return Err(format!(
                "{} unused bytes after the last record",
                payload_bytes - end
            ));
        }
        let segment = Self { bytes, records };
        let payload = segment.payload();
        if read_u64(segment.bytes.as_slice(), 88) != checksum(payload) {
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
        match damaged.as_slice() {
            // The damage lies in the padding between records, or in the payload checksum.
            [] => {
                "payload checksum mismatch, though every record matches its own checksum".to_owned()
            }
            [record] => format!("record {record} checksum mismatch"),
            [first, ..] => {
                let named: Vec<String> = damaged
                    .iter()
                    .take(NAMED_DAMAGED_RECORDS)
                    .map(usize::to_string)
                    .collect();
                let more = if damaged.len() > NAMED_DAMAGED_RECORDS {
                    ", …"
                } else {
                    ""
                };
                format!(
                    "record {first} checksum mismatch ({} damaged records: {}{more})",
                    damaged.len(),
                    named.join(", ")
                )
            }
        }
    }

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
        let (offset, len, _) = self.entry(record);
        &self.payload()[offset..offset + len]
    }

    /// One record viewed in place as a slice of plain numbers, with no copy: for records written
    /// by [`PodCodec`](crate::PodCodec). `None` when the length or alignment does not fit `P`.
    pub fn pod_record<P: Pod>(&self, record: usize) -> Option<&[P]> {
        bytemuck::try_cast_slice(self.record(record)).ok()
    }

    /// A heap copy, for the RAM cache.
    pub(crate) fn to_heap(&self) -> Self {
        Self {
            bytes: SegmentBytes::heap(self.bytes.as_slice()),
            records: self.records,
        }
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
        for len in [0, 1, 16, 17, 128, 129, 240, 241, 1024, 100_000] {
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
        assert_eq!(error, "record 1 checksum mismatch");
        damaged[at(3) + 2] ^= 1;
        let error = Segment::verify(SegmentBytes::heap(&damaged), &key(3)).unwrap_err();
        assert_eq!(
            error,
            "record 1 checksum mismatch (2 damaged records: 1, 3)"
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
        assert!(error.contains("payload checksum mismatch"), "{error}");
    }

    #[test]
    fn owned_bytes_keep_records_aligned() {
        let bytes = build(&[&[1, 0, 0, 0, 2, 0, 0, 0]]);
        // Bytes that start unaligned (here one byte into a buffer) are copied into words.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        for candidate in [
            SegmentBytes::owned(bytes),
            SegmentBytes::realigned(&shifted[1..]),
        ] {
            let segment = Segment::verify(candidate, &key(3)).unwrap();
            assert_eq!(segment.pod_record::<u32>(0), Some(&[1u32, 2][..]));
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
