//! The segment byte format: one file per source block, verified on every read.
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

use kiln_ml_core::Fingerprint;

/// Version of the byte layout above; part of every key, so a new layout never reads old files.
pub const FORMAT_VERSION: u32 = 2;

pub(crate) const MAGIC: [u8; 8] = *b"KILNSEG\0";
pub(crate) const HEADER_BYTES: usize = 104;
pub(crate) const INDEX_ENTRY_BYTES: usize = 24;
const ALIGN: usize = 8;
// The payload then starts aligned right after the index, with no padding to verify.
const _: () =
    assert!(HEADER_BYTES.is_multiple_of(ALIGN) && INDEX_ENTRY_BYTES.is_multiple_of(ALIGN));

/// XXH3-64, as every checksum of the format. Two implementations of the same function, for
/// speed: twox-hash picks AVX2 at run time, so a portable build hashes at AVX2 speed where the
/// CPU has it; xxhash-rust picks its SIMD at compile time, and is about twice as fast when the
/// build targets AVX-512 (`-C target-cpu=native` on such a CPU).
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    #[cfg(target_feature = "avx512f")]
    return xxhash_rust::xxh3::xxh3_64(bytes);
    #[cfg(not(target_feature = "avx512f"))]
    return twox_hash::XxHash3_64::oneshot(bytes);
}

/// `value` rounded up to the records' alignment.
pub(crate) fn align_up(value: usize) -> usize {
    value.div_ceil(ALIGN) * ALIGN
}

/// Where the payload starts in a segment of `records` records.
pub(crate) fn payload_start(records: usize) -> usize {
    HEADER_BYTES + INDEX_ENTRY_BYTES * records
}

/// The little-endian `u64` at `at`.
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// A `u64` field that must fit `usize` (it always does on 64-bit targets).
pub(crate) fn read_usize(bytes: &[u8], at: usize) -> Option<usize> {
    usize::try_from(read_u64(bytes, at)).ok()
}

/// The fingerprint at `at`.
pub(crate) fn read_fingerprint(bytes: &[u8], at: usize) -> Fingerprint {
    let mut word = [0; 16];
    word.copy_from_slice(&bytes[at..at + 16]);
    Fingerprint::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn checksums_are_xxh3_64() {
        // The published XXH3-64 of no bytes, and a pinned value for an input of many stripes,
        // whichever implementation this build uses.
        assert_eq!(checksum(b""), 0x2D06_8005_38D3_94C2);
        let long: Vec<u8> = (0..100_000u32).map(|i| (i * 131 % 251) as u8).collect();
        assert_eq!(checksum(&long), xxhash_rust::xxh3::xxh3_64(&long));
        assert_eq!(checksum(&long), twox_hash::XxHash3_64::oneshot(&long));
        assert_eq!(checksum(&long), 0xE870_C3DB_450B_9247);
    }
}
