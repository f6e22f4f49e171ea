//! Damaging files the way the wild damages them: footers rewritten with other claims, page
//! headers given the checksums some writers store, page bytes flipped.
//!
//! The `parquet` crate writes neither page checksums nor wrong footers, so these helpers edit
//! its output: footers through its own metadata types and `ParquetMetaDataWriter`, page
//! headers by hand in the Thrift compact protocol (only their first fields are touched).

use std::path::Path;

use kiln_ml_data::arrow_array::RecordBatch;
use kiln_ml_data::parquet::arrow::ArrowWriter;
use kiln_ml_data::parquet::basic::Compression;
use kiln_ml_data::parquet::file::metadata::{
    ColumnChunkMetaDataBuilder, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter,
    RowGroupMetaData,
};
use kiln_ml_data::parquet::file::properties::{EnabledStatistics, WriterProperties};

/// Writes `batch` in row groups of `row_group_rows` rows, each column chunk a single
/// plain-encoded data page (no dictionary, no statistics, no page index): the simplest file to
/// damage byte by byte.
pub fn write_single_pages(
    path: &Path,
    batch: &RecordBatch,
    row_group_rows: usize,
    compression: Compression,
) {
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_offset_index_disabled(true)
        .set_compression(compression)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// The footer of a Parquet file's bytes, and where its Thrift metadata starts.
pub fn footer(bytes: &[u8]) -> (ParquetMetaData, usize) {
    let tail = bytes.len() - 8;
    let length = u32::from_le_bytes(bytes[tail..tail + 4].try_into().unwrap()) as usize;
    let start = tail - length;
    let metadata = ParquetMetaDataReader::decode_metadata(&bytes[start..tail]).unwrap();
    (metadata, start)
}

/// `data` (a file's bytes up to its footer) followed by `metadata` as a footer.
fn with_footer(mut data: Vec<u8>, metadata: &ParquetMetaData) -> Vec<u8> {
    ParquetMetaDataWriter::new(&mut data, metadata)
        .finish()
        .unwrap();
    data
}

/// Rewrites the footer of the file at `path` with row group `row_group` passed through `edit`,
/// keeping every byte before the footer.
pub fn edit_row_group(
    path: &Path,
    row_group: usize,
    edit: impl FnOnce(RowGroupMetaData) -> RowGroupMetaData,
) {
    let bytes = std::fs::read(path).unwrap();
    let (metadata, start) = footer(&bytes);
    let mut groups = metadata.row_groups().to_vec();
    groups[row_group] = edit(groups[row_group].clone());
    let metadata = ParquetMetaData::new(metadata.file_metadata().clone(), groups);
    std::fs::write(path, with_footer(bytes[..start].to_vec(), &metadata)).unwrap();
}

/// Rewrites the footer of the file at `path` with one column chunk's metadata passed through
/// `edit`.
pub fn edit_column_chunk(
    path: &Path,
    row_group: usize,
    column: usize,
    edit: impl FnOnce(ColumnChunkMetaDataBuilder) -> ColumnChunkMetaDataBuilder,
) {
    edit_row_group(path, row_group, |group| {
        let mut chunks = group.columns().to_vec();
        chunks[column] = edit(chunks[column].clone().into_builder()).build().unwrap();
        group
            .into_builder()
            .set_column_metadata(chunks)
            .build()
            .unwrap()
    });
}

/// The first three fields of a page header (type, uncompressed size, compressed size, all
/// `i32`): the values and the offset just past them, relative to `header`.
pub fn page_header_sizes(header: &[u8]) -> ([i32; 3], usize) {
    let mut values = [0; 3];
    let mut at = 0;
    for value in &mut values {
        assert_eq!(header[at], 0x15, "a short i32 field header (delta 1)");
        let (decoded, next) = read_zigzag(header, at + 1);
        *value = decoded;
        at = next;
    }
    (values, at)
}

/// Gives every page of the file at `path` the CRC-32 checksum the format allows in its header
/// (the `crc` field, 4), as parquet-java, Arrow C++ and others can write it.
///
/// Expects what [`write_single_pages`] writes: one data page per column chunk, no dictionary page,
/// no page index. Column chunks move (each header grows by a few bytes); the footer follows.
pub fn add_page_checksums(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let (metadata, _) = footer(&bytes);
    let mut out = b"PAR1".to_vec();
    let mut groups = Vec::new();
    for group in metadata.row_groups() {
        let mut chunks = Vec::new();
        let group_start = out.len() as i64;
        for chunk in group.columns() {
            assert!(
                chunk.dictionary_page_offset().is_none(),
                "no dictionary page"
            );
            let start = chunk.data_page_offset() as usize;
            let old = &bytes[start..start + chunk.compressed_size() as usize];
            let ([_, _, page_bytes], fields_end) = page_header_sizes(old);
            let page = &old[old.len() - page_bytes as usize..];
            assert_eq!(
                old[fields_end] >> 4,
                2,
                "the next field is 5, the data page header"
            );
            let new_start = out.len();
            out.extend_from_slice(&old[..fields_end]);
            out.push(0x15); // field 4 (delta 1), i32
            write_zigzag(&mut out, crc32(page) as i32);
            out.push(old[fields_end] - 0x10); // field 5 now follows field 4: delta 1
            out.extend_from_slice(&old[fields_end + 1..]);
            let grown = (out.len() - new_start - old.len()) as i64;
            chunks.push(
                chunk
                    .clone()
                    .into_builder()
                    .set_data_page_offset(new_start as i64)
                    .set_total_compressed_size(chunk.compressed_size() + grown)
                    .set_total_uncompressed_size(chunk.uncompressed_size() + grown)
                    .build()
                    .unwrap(),
            );
        }
        groups.push(
            group
                .clone()
                .into_builder()
                .set_column_metadata(chunks)
                .set_file_offset(group_start)
                .build()
                .unwrap(),
        );
    }
    let metadata = ParquetMetaData::new(metadata.file_metadata().clone(), groups);
    std::fs::write(path, with_footer(out, &metadata)).unwrap();
}

/// Flips every bit of one byte of a file.
pub fn flip_byte(path: &Path, offset: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset] ^= 0xFF;
    std::fs::write(path, bytes).unwrap();
}

/// CRC-32 (IEEE 802.3, as zlib and the Parquet format compute it).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zigzag varint `i32` at `at`; returns it and the offset past it.
pub fn read_zigzag(bytes: &[u8], mut at: usize) -> (i32, usize) {
    let mut value = 0u32;
    let mut shift = 0;
    loop {
        let byte = bytes[at];
        at += 1;
        value |= u32::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (((value >> 1) as i32) ^ -((value & 1) as i32), at)
}

fn write_zigzag(out: &mut Vec<u8>, value: i32) {
    let mut zigzag = ((value << 1) ^ (value >> 31)) as u32;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

#[test]
fn the_helpers_agree_with_known_values() {
    // The check value of CRC-32/ISO-HDLC.
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    for value in [0, 1, -1, 63, -64, 300, i32::MAX, i32::MIN] {
        let mut out = Vec::new();
        write_zigzag(&mut out, value);
        assert_eq!(read_zigzag(&out, 0), (value, out.len()));
    }
}
