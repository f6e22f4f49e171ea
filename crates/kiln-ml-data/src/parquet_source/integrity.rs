//! What a footer claims, checked against the file and against itself when the source is
//! built, before any row count or size in it is trusted, scheduled or allocated.

use std::ops::Range;
use std::path::Path;

use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};

use super::codec::{codec_name, unreadable_codec};
use super::range_reader::{COALESCE_GAP_BYTES, coalesce};
use crate::{Error, Result};

/// Where the column chunks of a Parquet file may lie: after the leading magic.
const FIRST_DATA_BYTE: u64 = 4;

/// Checks every row group of a footer:
///
/// - its row count is not negative;
/// - the row count equals the value count of every non-repeated leaf's column chunk (a value
///   count includes nulls: one per row) and is at most that of a repeated leaf (at least one
///   level per row), so a row count that is off, however large, is caught, whichever columns
///   are projected;
/// - each projected column chunk (`leaves`) lies between the leading magic and the footer,
///   which starts at `data_end`, and its codec is compiled in.
///
/// Returns, per row group, the byte ranges of its projected column chunks, coalesced (chunks
/// within [`COALESCE_GAP_BYTES`] of each other are one range): what each read of the row group
/// fetches, worked out here once rather than off the footer's metadata at every read (out of
/// cache under a shuffled plan).
///
/// The error names the file, the row group and, for a column chunk, the column.
pub(crate) fn check_footer(
    path: &Path,
    metadata: &ParquetMetaData,
    leaves: &[usize],
    data_end: u64,
) -> Result<Vec<Vec<Range<u64>>>> {
    let mut ranges = Vec::with_capacity(metadata.num_row_groups());
    for (row_group, group) in metadata.row_groups().iter().enumerate() {
        let corrupt =
            |column: Option<&ColumnChunkMetaData>, reason: String| Error::CorruptParquet {
                path: path.to_owned(),
                row_group: Some(row_group),
                column: column.map(|chunk| chunk.column_path().string()),
                reason,
            };
        let rows = group.num_rows();
        if rows < 0 {
            return Err(corrupt(
                None,
                format!("the footer claims {rows} rows for the row group"),
            ));
        }
        for chunk in group.columns() {
            let values = chunk.num_values();
            let repeated = chunk.column_descr().max_rep_level() > 0;
            if (!repeated && values != rows) || (repeated && values < rows) {
                return Err(corrupt(
                    Some(chunk),
                    format!(
                        "the footer claims {rows} rows for the row group, but the column chunk \
                         holds {values} values{}",
                        if repeated {
                            " (at least one per row)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        let mut chunks = Vec::with_capacity(leaves.len());
        for &leaf in leaves {
            let Some(chunk) = group.columns().get(leaf) else {
                return Err(corrupt(
                    None,
                    format!(
                        "the footer lists {} column chunks for the row group, but the schema \
                         has leaf column {leaf}",
                        group.columns().len()
                    ),
                ));
            };
            if let Some(remedy) = unreadable_codec(chunk.compression()) {
                return Err(Error::UnsupportedCodec {
                    path: path.to_owned(),
                    row_group,
                    column: chunk.column_path().string(),
                    codec: codec_name(chunk.compression()),
                    remedy,
                });
            }
            chunks
                .push(chunk_range(chunk, data_end).map_err(|reason| corrupt(Some(chunk), reason))?);
            if chunk.uncompressed_size() < 0 {
                return Err(corrupt(
                    Some(chunk),
                    format!(
                        "the footer claims an uncompressed size of {} bytes",
                        chunk.uncompressed_size()
                    ),
                ));
            }
        }
        ranges.push(coalesce(chunks, COALESCE_GAP_BYTES));
    }
    Ok(ranges)
}

/// The bytes of a column chunk, checked to lie between the leading magic and `data_end` (the
/// footer's start); the reason it does not, otherwise.
fn chunk_range(
    chunk: &ColumnChunkMetaData,
    data_end: u64,
) -> std::result::Result<Range<u64>, String> {
    // Not `ColumnChunkMetaData::byte_range`, which asserts on negative values.
    let offset = chunk
        .dictionary_page_offset()
        .unwrap_or_else(|| chunk.data_page_offset());
    let size = chunk.compressed_size();
    let (Ok(start), Ok(len)) = (u64::try_from(offset), u64::try_from(size)) else {
        return Err(format!(
            "the footer gives the column chunk offset {offset} and size {size}"
        ));
    };
    let end = start.saturating_add(len);
    if start < FIRST_DATA_BYTE || end > data_end {
        return Err(format!(
            "the footer places the column chunk at bytes {start}..{end}, outside the file's \
             data (bytes {FIRST_DATA_BYTE}..{data_end}, before the footer)"
        ));
    }
    Ok(start..end)
}
