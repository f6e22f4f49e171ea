//! A Parquet file's footer: found from the file's last bytes, hashed and parsed.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use kiln_ml_core::Fingerprint;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::{ParquetMetaDataOptions, ParquetMetaDataReader};
use parquet::schema::types::SchemaDescriptor;

use super::schema_depth::{MAX_SCHEMA_DEPTH, schema_deeper_than};
use crate::interner::Interner;
use crate::{Error, Result};

const MAGIC: &[u8; 4] = b"PAR1";
/// The end of every Parquet file: the footer's length (u32, little-endian), then the magic.
const TAIL_BYTES: u64 = 8;

/// One Parquet schema descriptor per distinct schema, shared by every file that has it.
///
/// A dataset's files nearly always share one schema, yet each footer decodes into a descriptor
/// of its own, which every column chunk's metadata points into. Under a shuffled plan each read
/// is of another file, so setting up its reader walked that file's descriptor out of cache
/// (about 1% of a per-sample block-shuffle epoch's CPU in the `block_shuffle` example).
static SCHEMAS: Interner<SchemaDescriptor> = Interner::new(16);

/// A parsed footer and where it lies.
#[derive(Debug, Clone)]
pub(crate) struct Footer {
    pub(crate) metadata: ArrowReaderMetadata,
    /// The footer's bytes, from the Thrift metadata to the end of the file: column chunks
    /// must end before `bytes.start`.
    pub(crate) bytes: Range<u64>,
    /// XXH3-128 of those bytes.
    pub(crate) hash: Fingerprint,
}

impl Footer {
    /// Checks the magic at both ends of a file of `bytes` bytes, then reads, hashes and parses
    /// its footer, with the bytes from `read_at` (a local file, or an object's fetched ends).
    /// The footer's stated length is checked against the file before anything is allocated by
    /// it.
    pub(crate) fn read_with(
        read_at: &mut dyn FnMut(Range<u64>) -> Result<Vec<u8>>,
        path: &Path,
        bytes: u64,
    ) -> Result<Self> {
        let tail = read_ends(read_at, path, bytes)?;
        let length = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        // The leading magic, the footer, its tail: anything longer cannot be this file's.
        if length + TAIL_BYTES + MAGIC.len() as u64 > bytes {
            return Err(corrupt(
                path,
                format!("the footer claims {length} bytes, more than the {bytes}-byte file holds"),
            ));
        }
        let range = bytes - TAIL_BYTES - length..bytes;
        let footer = read_at(range.clone())?;
        let hash = Fingerprint::of_bytes(&footer);
        let thrift = &footer[..length as usize];
        if let Some(depth) = schema_deeper_than(thrift, MAX_SCHEMA_DEPTH) {
            return Err(corrupt(
                path,
                format!(
                    "its schema nests {depth} levels deep, more than the {MAX_SCHEMA_DEPTH} this \
                     reader accepts (parsing it could overflow the stack)"
                ),
            ));
        }
        let metadata = parse(thrift, path)?;
        Ok(Self {
            metadata,
            bytes: range,
            hash,
        })
    }

    /// Whether the file (still of the size it had when the footer was read) has the same
    /// footer: one read of the footer's bytes, no parsing.
    pub(crate) fn is_unchanged_in(&self, file: &mut File, path: &Path) -> Result<bool> {
        #[cfg(test)]
        COMPARISONS.with(|count| count.set(count.get() + 1));
        let now = read_at(file, path, self.bytes.clone())?;
        Ok(Fingerprint::of_bytes(&now) == self.hash)
    }
}

#[cfg(test)]
thread_local! {
    /// Footers compared with [`Footer::is_unchanged_in`] on this thread.
    pub(crate) static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Parses the Thrift metadata and derives the Arrow schema. (The reader can panic on a
/// malformed footer: [`ParquetFile::open`](super::file::ParquetFile::open) catches that.)
fn parse(metadata: &[u8], path: &Path) -> Result<ArrowReaderMetadata> {
    ParquetMetaDataReader::decode_schema(metadata)
        .and_then(|schema| {
            // Decoded against the descriptor shared with the files of the same schema.
            let options = ParquetMetaDataOptions::new().with_schema(SCHEMAS.intern(schema));
            ParquetMetaDataReader::decode_metadata_with_options(metadata, Some(&options))
        })
        .and_then(|metadata| {
            ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::new())
        })
        .map_err(|error| corrupt(path, format!("cannot read the footer: {error}")))
}

/// Tells a non-Parquet file (wrong leading magic) from a truncated one (no trailing magic);
/// returns the last [`TAIL_BYTES`] bytes.
fn read_ends(
    read_at: &mut dyn FnMut(Range<u64>) -> Result<Vec<u8>>,
    path: &Path,
    bytes: u64,
) -> Result<Vec<u8>> {
    if bytes < MAGIC.len() as u64 {
        return Err(Error::NotParquet {
            path: path.to_owned(),
            reason: format!("it has only {bytes} bytes"),
        });
    }
    let head = read_at(0..MAGIC.len() as u64)?;
    if head != MAGIC {
        return Err(Error::NotParquet {
            path: path.to_owned(),
            reason: format!(
                "it starts with {:?} instead of \"PAR1\"",
                String::from_utf8_lossy(&head)
            ),
        });
    }
    let tail = if bytes >= MAGIC.len() as u64 + TAIL_BYTES {
        Some(read_at(bytes - TAIL_BYTES..bytes)?)
    } else {
        None
    };
    match tail {
        Some(tail) if tail[4..] == MAGIC[..] => Ok(tail),
        _ => Err(corrupt(
            path,
            format!(
                "truncated: the {bytes}-byte file starts like Parquet but does not end with the \
                 \"PAR1\" footer magic"
            ),
        )),
    }
}

/// The bytes of `range` of a local file.
pub(crate) fn read_at(file: &mut File, path: &Path, range: Range<u64>) -> Result<Vec<u8>> {
    let mut buffer = vec![0; (range.end - range.start) as usize];
    file.seek(SeekFrom::Start(range.start))
        .and_then(|_| file.read_exact(&mut buffer))
        .map_err(|source| Error::io("reading", path, source))?;
    Ok(buffer)
}

fn corrupt(path: &Path, reason: String) -> Error {
    Error::CorruptParquet {
        path: path.to_owned(),
        row_group: None,
        column: None,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use parquet::schema::parser::parse_message_type;

    use super::*;

    fn schema(message: &str) -> SchemaDescriptor {
        SchemaDescriptor::new(Arc::new(parse_message_type(message).unwrap()))
    }

    #[test]
    fn equal_schemas_share_one_descriptor_and_others_do_not() {
        let shared = |message| SCHEMAS.intern(Arc::new(schema(message)));
        let message = "message m { required int64 id; required float x; }";
        let (first, second) = (shared(message), shared(message));
        assert!(Arc::ptr_eq(&first, &second));
        let other = shared("message m { required int64 id; required double x; }");
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(
            *other,
            schema("message m { required int64 id; required double x; }")
        );
    }
}
