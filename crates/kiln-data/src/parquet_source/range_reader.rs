//! A Parquet `ChunkReader` over one byte range of a file, read with a single sequential read.

use bytes::{Buf, Bytes};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

/// The bytes `start..start + bytes.len()` of a file of `file_len` bytes.
///
/// The Parquet reader asks for column chunks by absolute file offset; this answers from the one
/// buffer holding a row group's projected chunks, so decoding a row group costs one read and
/// no seeks, and concurrent readers never share a file cursor.
#[derive(Debug, Clone)]
pub(crate) struct RangeReader {
    start: u64,
    bytes: Bytes,
    file_len: u64,
}

impl RangeReader {
    pub(crate) fn new(start: u64, bytes: Bytes, file_len: u64) -> Self {
        Self {
            start,
            bytes,
            file_len,
        }
    }

    /// Bytes held in memory: what was read from the file.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Offset into the buffer of the file range `start..start + length`, if it is held.
    fn offset(&self, start: u64, length: usize) -> Result<usize, ParquetError> {
        let held = self.start..self.start + self.bytes.len() as u64;
        let end = start.checked_add(length as u64);
        match end {
            Some(end) if start >= held.start && end <= held.end => {
                Ok((start - self.start) as usize)
            }
            _ => Err(ParquetError::General(format!(
                "the reader asked for bytes {start}..{} outside the row group's range {}..{}",
                start.saturating_add(length as u64),
                held.start,
                held.end
            ))),
        }
    }
}

impl Length for RangeReader {
    fn len(&self) -> u64 {
        self.file_len
    }
}

impl ChunkReader for RangeReader {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        let offset = self.offset(start, 0)?;
        Ok(self.bytes.slice(offset..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        let offset = self.offset(start, length)?;
        Ok(self.bytes.slice(offset..offset + length))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn answers_by_absolute_offset() {
        let reader = RangeReader::new(100, Bytes::from_static(b"abcdef"), 1000);
        assert_eq!(reader.len(), 1000);
        assert_eq!(&reader.get_bytes(102, 3).unwrap()[..], b"cde");
        let mut rest = String::new();
        reader
            .get_read(104)
            .unwrap()
            .read_to_string(&mut rest)
            .unwrap();
        assert_eq!(rest, "ef");
    }

    #[test]
    fn rejects_offsets_outside_the_range() {
        let reader = RangeReader::new(100, Bytes::from_static(b"abcdef"), 1000);
        assert!(reader.get_bytes(99, 1).is_err());
        assert!(reader.get_bytes(104, 3).is_err());
        let error = reader.get_read(200).unwrap_err().to_string();
        assert!(
            error.contains("outside the row group's range 100..106"),
            "{error}"
        );
    }
}
