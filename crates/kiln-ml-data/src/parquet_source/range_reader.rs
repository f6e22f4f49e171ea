//! A Parquet `ChunkReader` over the byte ranges of a file that one row group's projected
//! column chunks occupy, each read with a single sequential read.

use std::ops::Range;

use bytes::{Buf, Bytes};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

/// Column chunks at most this far apart are read together, gap included: on a warm page cache a
/// 64 KiB copy costs about what a system call does, and on an SSD it is cheaper than another
/// request. Farther apart, the unprojected columns in between are skipped.
pub(crate) const COALESCE_GAP_BYTES: u64 = 64 << 10;

/// Merges byte ranges that overlap or lie within `max_gap` of each other, in file order.
pub(crate) fn coalesce(mut ranges: Vec<Range<u64>>, max_gap: u64) -> Vec<Range<u64>> {
    ranges.retain(|range| !range.is_empty());
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end.saturating_add(max_gap) => {
                last.end = last.end.max(range.end);
            }
            _ => merged.push(range),
        }
    }
    merged
}

/// Byte ranges of a file of `file_len` bytes, held in memory, sorted and disjoint.
///
/// The Parquet reader asks for column chunks by absolute file offset; this answers from the
/// buffers holding a row group's projected chunks, so decoding a row group costs one read per
/// group of nearby chunks and no seeks, and concurrent readers never share a file cursor.
#[derive(Debug, Clone)]
pub(crate) struct RangeReader {
    ranges: Vec<(u64, Bytes)>,
    file_len: u64,
}

impl RangeReader {
    /// `ranges` are `(file offset, bytes)` pairs, sorted by offset and not overlapping.
    pub(crate) fn new(ranges: Vec<(u64, Bytes)>, file_len: u64) -> Self {
        debug_assert!(
            ranges
                .windows(2)
                .all(|pair| pair[0].0 + pair[0].1.len() as u64 <= pair[1].0),
            "ranges must be sorted and disjoint"
        );
        Self { ranges, file_len }
    }

    /// Bytes held in memory: what was read from the file.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(_, bytes)| bytes.len() as u64)
            .sum()
    }

    /// The held range containing the file range `start..start + length`, and the offset of
    /// `start` in it.
    fn locate(&self, start: u64, length: usize) -> Result<(&Bytes, usize), ParquetError> {
        let after = self.ranges.partition_point(|(offset, _)| *offset <= start);
        let end = start.checked_add(length as u64);
        if let Some((offset, bytes)) = after.checked_sub(1).map(|index| &self.ranges[index])
            && end.is_some_and(|end| end <= offset + bytes.len() as u64)
        {
            return Ok((bytes, (start - offset) as usize));
        }
        let held: Vec<String> = self
            .ranges
            .iter()
            .map(|(offset, bytes)| format!("{offset}..{}", offset + bytes.len() as u64))
            .collect();
        Err(ParquetError::General(format!(
            "the reader asked for bytes {start}..{} outside those read for the row group ({})",
            start.saturating_add(length as u64),
            held.join(", ")
        )))
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
        let (bytes, offset) = self.locate(start, 0)?;
        Ok(bytes.slice(offset..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        let (bytes, offset) = self.locate(start, length)?;
        Ok(bytes.slice(offset..offset + length))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn answers_by_absolute_offset() {
        let reader = RangeReader::new(vec![(100, Bytes::from_static(b"abcdef"))], 1000);
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
    fn answers_from_whichever_range_holds_the_bytes() {
        let reader = RangeReader::new(
            vec![
                (100, Bytes::from_static(b"abc")),
                (500, Bytes::from_static(b"wxyz")),
            ],
            1000,
        );
        assert_eq!(reader.held_bytes(), 7);
        assert_eq!(&reader.get_bytes(101, 2).unwrap()[..], b"bc");
        assert_eq!(&reader.get_bytes(501, 3).unwrap()[..], b"xyz");
        assert_eq!(&reader.get_bytes(504, 0).unwrap()[..], b"");
    }

    #[test]
    fn rejects_offsets_outside_the_ranges() {
        let reader = RangeReader::new(
            vec![
                (100, Bytes::from_static(b"abcdef")),
                (200, Bytes::from_static(b"gh")),
            ],
            1000,
        );
        assert!(reader.get_bytes(99, 1).is_err());
        assert!(reader.get_bytes(104, 3).is_err());
        // Spanning the gap between two ranges is refused too.
        assert!(reader.get_bytes(105, 96).is_err());
        let error = reader.get_read(300).unwrap_err().to_string();
        assert!(
            error.contains("outside those read for the row group (100..106, 200..202)"),
            "{error}"
        );
    }

    #[test]
    fn coalesces_near_ranges_and_skips_far_gaps() {
        assert_eq!(coalesce(vec![], 10), Vec::<Range<u64>>::new());
        // Unsorted input, an overlap, a gap within reach, a gap beyond it, an empty range.
        let merged = coalesce(vec![50..60, 0..10, 5..12, 22..30, 7..7], 10);
        assert_eq!(merged, [0..30, 50..60]);
        assert_eq!(coalesce(vec![0..10, 21..30], 10), [0..10, 21..30]);
        assert_eq!(coalesce(vec![0..10, 20..30], 10), vec![(0..30)]);
    }
}
