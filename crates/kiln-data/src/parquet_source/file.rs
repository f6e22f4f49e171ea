//! One Parquet file: its identity, its footer (read once and kept) and row-group reads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use bytes::Bytes;
use kiln_core::Fingerprint;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use super::projection::Projection;
use super::range_reader::{COALESCE_GAP_BYTES, RangeReader, coalesce};
use crate::{Error, Result};

const MAGIC: &[u8; 4] = b"PAR1";

/// An opened Parquet file: path, size and modification time when opened, footer metadata and
/// the projection of the source's columns.
#[derive(Debug, Clone)]
pub(crate) struct ParquetFile {
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
    metadata: ArrowReaderMetadata,
    projection: Projection,
}

impl ParquetFile {
    /// Opens a file, checks the Parquet magic at both ends and reads its footer.
    pub(crate) fn open(path: &Path, columns: Option<&[String]>) -> Result<Self> {
        let mut file = File::open(path).map_err(|source| Error::io("opening", path, source))?;
        let (bytes, modified) = identity_of(&file, path)?;
        check_magic(&mut file, path, bytes)?;
        let metadata =
            ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|error| {
                Error::CorruptParquet {
                    path: path.to_owned(),
                    row_group: None,
                    column: None,
                    reason: format!("cannot read the footer: {error}"),
                }
            })?;
        let projection = Projection::new(path, &metadata, columns)?;
        Ok(Self {
            path: path.to_owned(),
            bytes,
            modified,
            metadata,
            projection,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Rows of each row group, in file order.
    pub(crate) fn row_group_rows(&self) -> Vec<u64> {
        self.metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|group| group.num_rows().max(0) as u64)
            .collect()
    }

    /// The uncompressed size of one row group's projected column chunks, as the footer states
    /// it: about what its decoded columns take in memory.
    pub(crate) fn row_group_bytes(&self, row_group: usize) -> Option<u64> {
        let group = self.metadata.metadata().row_groups().get(row_group)?;
        let bytes = self
            .projection
            .leaves
            .iter()
            .filter_map(|&leaf| group.columns().get(leaf))
            .map(|chunk| chunk.uncompressed_size().max(0) as u64)
            .sum();
        Some(bytes)
    }

    /// The file's identity: path, size and modification time (to the nanosecond).
    pub(crate) fn identity(&self) -> Fingerprint {
        let since_epoch = self.modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Fingerprint::builder()
            .str("parquet-file")
            .str(&self.path.to_string_lossy())
            .u64(self.bytes)
            .u64(since_epoch.as_secs())
            .u64(u64::from(since_epoch.subsec_nanos()))
            .finish()
    }

    /// Reads and decodes one row group's projected columns (one sequential read per group of
    /// nearby column chunks).
    ///
    /// Returns the batch and the number of bytes read from disk.
    pub(crate) fn read_row_group(&self, row_group: usize) -> Result<(RecordBatch, u64)> {
        let mut file =
            File::open(&self.path).map_err(|source| Error::io("opening", &self.path, source))?;
        self.check_unchanged(&file)?;
        let reader = self.read_range(&mut file, row_group)?;
        let bytes_read = reader.held_bytes();
        let batch = self
            .decode(reader.clone(), row_group, self.projection.mask.clone())
            .map_err(|reason| Error::CorruptParquet {
                path: self.path.clone(),
                row_group: Some(row_group),
                column: self.failing_column(&reader, row_group),
                reason,
            })?;
        Ok((batch, bytes_read))
    }

    /// Fails when the file's size or modification time changed since it was opened: its footer
    /// (and any cache keyed by its identity) would no longer describe it.
    fn check_unchanged(&self, file: &File) -> Result<()> {
        let (bytes, modified) = identity_of(file, &self.path)?;
        let reason = if bytes != self.bytes {
            format!("it had {} bytes and now has {bytes}", self.bytes)
        } else if modified != self.modified {
            "its modification time changed".to_owned()
        } else {
            return Ok(());
        };
        Err(Error::FileChanged {
            path: self.path.clone(),
            reason,
        })
    }

    /// Reads the projected column chunks of a row group: one sequential read per group of
    /// chunks that lie within [`COALESCE_GAP_BYTES`] of each other.
    fn read_range(&self, file: &mut File, row_group: usize) -> Result<RangeReader> {
        let group = self.metadata.metadata().row_group(row_group);
        let mut chunks = Vec::with_capacity(self.projection.leaves.len());
        for &leaf in &self.projection.leaves {
            let chunk = group.column(leaf);
            // `ColumnChunkMetaData::byte_range` asserts on negative values; a corrupt footer
            // must be an error naming the file, row group and column instead.
            let offset = chunk
                .dictionary_page_offset()
                .unwrap_or_else(|| chunk.data_page_offset());
            let size = chunk.compressed_size();
            let corrupt = |reason: String| Error::CorruptParquet {
                path: self.path.clone(),
                row_group: Some(row_group),
                column: Some(chunk.column_path().string()),
                reason,
            };
            let (Ok(start), Ok(len)) = (u64::try_from(offset), u64::try_from(size)) else {
                return Err(corrupt(format!(
                    "the footer gives the column chunk offset {offset} and size {size}"
                )));
            };
            let end = start.saturating_add(len);
            if end > self.bytes {
                return Err(corrupt(format!(
                    "the footer places the column chunk at bytes {start}..{end}, past the end \
                     of the {}-byte file",
                    self.bytes
                )));
            }
            chunks.push(start..end);
        }
        let mut held = Vec::new();
        for range in coalesce(chunks, COALESCE_GAP_BYTES) {
            let mut buffer = vec![0; (range.end - range.start) as usize];
            file.seek(SeekFrom::Start(range.start))
                .and_then(|_| file.read_exact(&mut buffer))
                .map_err(|source| Error::io("reading", &self.path, source))?;
            held.push((range.start, Bytes::from(buffer)));
        }
        Ok(RangeReader::new(held, self.bytes))
    }

    /// Decodes a row group under a projection into one batch.
    fn decode(
        &self,
        reader: RangeReader,
        row_group: usize,
        mask: ProjectionMask,
    ) -> std::result::Result<RecordBatch, String> {
        let rows = self
            .metadata
            .metadata()
            .row_group(row_group)
            .num_rows()
            .max(0) as usize;
        let batches =
            ParquetRecordBatchReaderBuilder::new_with_metadata(reader, self.metadata.clone())
                .with_row_groups(vec![row_group])
                .with_projection(mask)
                .with_batch_size(rows.max(1))
                .build()
                .map_err(|error| error.to_string())?;
        let schema = arrow_array::RecordBatchReader::schema(&batches);
        let batches: Vec<RecordBatch> = batches
            .collect::<std::result::Result<_, _>>()
            .map_err(|error| error.to_string())?;
        let batch = match batches.len() {
            0 => RecordBatch::new_empty(schema),
            1 => batches
                .into_iter()
                .next()
                .unwrap_or_else(|| RecordBatch::new_empty(schema)),
            _ => arrow_select::concat::concat_batches(&schema, &batches)
                .map_err(|error| error.to_string())?,
        };
        if batch.num_rows() != rows {
            return Err(format!(
                "decoded {} rows but the footer promises {rows}",
                batch.num_rows()
            ));
        }
        Ok(batch)
    }

    /// After a failed decode, the first projected column that fails on its own, if any: the
    /// error path only, so the cost of decoding column by column does not matter.
    fn failing_column(&self, reader: &RangeReader, row_group: usize) -> Option<String> {
        let descriptor = self.metadata.parquet_schema();
        self.projection.leaves.iter().find_map(|&leaf| {
            let mask = ProjectionMask::leaves(descriptor, [leaf]);
            self.decode(reader.clone(), row_group, mask)
                .err()
                .map(|_| descriptor.column(leaf).path().string())
        })
    }
}

fn identity_of(file: &File, path: &Path) -> Result<(u64, SystemTime)> {
    let metadata = file
        .metadata()
        .map_err(|source| Error::io("inspecting", path, source))?;
    let modified = metadata
        .modified()
        .map_err(|source| Error::io("reading the modification time of", path, source))?;
    Ok((metadata.len(), modified))
}

/// Tells a non-Parquet file (wrong leading magic) from a truncated one (no trailing magic).
fn check_magic(file: &mut File, path: &Path, bytes: u64) -> Result<()> {
    let not_parquet = |reason: String| Error::NotParquet {
        path: path.to_owned(),
        reason,
    };
    let read_at = |file: &mut File, offset: u64| -> Result<[u8; 4]> {
        let mut magic = [0; 4];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut magic))
            .map_err(|source| Error::io("reading", path, source))?;
        Ok(magic)
    };
    if bytes < 4 {
        return Err(not_parquet(format!("it has only {bytes} bytes")));
    }
    let head = read_at(file, 0)?;
    if &head != MAGIC {
        return Err(not_parquet(format!(
            "it starts with {:?} instead of \"PAR1\"",
            String::from_utf8_lossy(&head)
        )));
    }
    let tail = if bytes >= 12 {
        Some(read_at(file, bytes - 4)?)
    } else {
        None
    };
    if tail.as_ref() != Some(MAGIC) {
        return Err(Error::CorruptParquet {
            path: path.to_owned(),
            row_group: None,
            column: None,
            reason: format!(
                "truncated: the {bytes}-byte file starts like Parquet but does not end with the \
                 \"PAR1\" footer magic"
            ),
        });
    }
    Ok(())
}
