//! Writing a segment: records encoded straight into their place in one buffer.

use super::format::{
    FORMAT_VERSION, HEADER_BYTES, INDEX_ENTRY_BYTES, MAGIC, align_up, checksum, payload_start,
};
use super::key::SegmentKey;

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
    ///
    /// # Panics
    ///
    /// When `encode` leaves the buffer shorter than it found it (it replaced or truncated it
    /// instead of appending), whether it succeeded or failed.
    pub fn push<E>(&mut self, encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<(), E> {
        let aligned = align_up(self.buffer.len());
        self.buffer.resize(aligned, 0);
        let result = encode(&mut self.buffer);
        // Checked on failure too: a failed encoder that cut earlier records would leave the
        // next one written over them.
        assert!(
            self.buffer.len() >= aligned,
            "the encoder shortened the segment buffer to {} bytes of {aligned}: it must append \
             its record, not replace the buffer",
            self.buffer.len()
        );
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

#[cfg(test)]
mod tests {
    use kiln_ml_core::Fingerprint;

    use super::*;
    use crate::test_support::{build, key};

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
    fn a_failed_record_leaves_no_trace() {
        let mut builder = SegmentBuilder::new(key(3), 3);
        for record in [&b"abc"[..], b"", &[7; 9]] {
            builder
                .push(|out| {
                    out.extend_from_slice(b"partial");
                    Err::<(), _>("refused")
                })
                .unwrap_err();
            builder
                .push(|out| {
                    out.extend_from_slice(record);
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        assert_eq!(builder.finish().unwrap(), build(&[b"abc", b"", &[7; 9]]));
    }

    #[test]
    #[should_panic(expected = "the encoder shortened the segment buffer")]
    fn a_failed_encoder_that_cut_the_buffer_panics() {
        let mut builder = SegmentBuilder::new(key(0), 2);
        builder
            .push(|out| {
                out.extend_from_slice(b"first");
                Ok::<_, ()>(())
            })
            .unwrap();
        let _ = builder.push(|out| {
            out.clear();
            Err::<(), _>("refused")
        });
    }

    #[test]
    fn a_short_count_does_not_finish() {
        let builder = SegmentBuilder::new(key(0), 2);
        assert!(builder.finish().is_none());
    }
}
