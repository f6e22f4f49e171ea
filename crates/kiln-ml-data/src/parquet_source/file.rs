//! One Parquet file: its identity, its footer (read and checked once, then kept) and row-group
//! reads.

use std::fs::File;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use bytes::Bytes;
use kiln_ml_core::Fingerprint;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::change_stamp::{ChangeStamp, Vouched};
use super::footer::{Footer, read_at};
use super::integrity::check_footer;
use super::projection::Projection;
use super::range_reader::RangeReader;
#[cfg(feature = "remote")]
use super::remote::{RemoteObject, Tail};
use crate::{Error, Result};

/// Rows decoded at a time: a row group is decoded in chunks of at most this many rows, so what
/// the decoder allocates up front never depends on the row count a footer claims, and a huge
/// row group never needs a second, concatenated copy. Row groups of up to this many rows (the
/// usual case) are one chunk.
const DECODE_CHUNK_ROWS: usize = 8192;

/// An opened Parquet file: path, size, modification time and footer when opened (the footer
/// checked against the file), and the projection of the source's columns.
#[derive(Debug, Clone)]
pub(crate) struct ParquetFile {
    /// The local path, or an object's URL.
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
    /// The change stamp that tells a later read the local file is unchanged without reading
    /// its footer again (none off Unix, for objects, or until the file's last change settled).
    vouched: Vouched,
    footer: Footer,
    projection: Projection,
    /// Per row group, the byte ranges of its projected column chunks, coalesced, as
    /// [`check_footer`] found them when the file was opened.
    ranges: Vec<Vec<Range<u64>>>,
    /// Where an object-store file lives; `None` for a local file.
    #[cfg(feature = "remote")]
    remote: Option<RemoteObject>,
}

/// A row group's bytes being fetched ahead of its read (object stores only).
#[cfg(feature = "remote")]
pub(crate) type PendingRead = tokio::task::JoinHandle<Result<Vec<(u64, Bytes)>>>;
/// A row group's bytes being fetched ahead of its read (object stores only).
#[cfg(not(feature = "remote"))]
pub(crate) type PendingRead = std::convert::Infallible;

impl ParquetFile {
    /// Opens a file, checks the Parquet magic at both ends, reads its footer and checks it
    /// (row counts, column chunk places, codecs: see [`check_footer`]).
    ///
    /// The Parquet reader can panic on a malformed footer; that is caught here (on whichever
    /// thread opens the file) and reported as [`Error::CorruptParquet`] naming the file.
    pub(crate) fn open(path: &Path, columns: Option<&[String]>) -> Result<Self> {
        let mut file = File::open(path).map_err(|source| Error::io("opening", path, source))?;
        let checked_at = SystemTime::now();
        let (bytes, modified, stamp) = identity_of(&file, path)?;
        let opened = Self::open_with(
            path.to_owned(),
            (bytes, modified),
            &mut |range| read_at(&mut file, path, range),
            columns,
            #[cfg(feature = "remote")]
            None,
        )?;
        opened.vouched.footer_matched(stamp, checked_at);
        Ok(opened)
    }

    /// Opens an object from its fetched ends (see [`open`](Self::open)); a footer longer than
    /// the ends costs one more request.
    #[cfg(feature = "remote")]
    pub(crate) fn open_remote(
        object: &RemoteObject,
        ends: &Tail,
        columns: Option<&[String]>,
    ) -> Result<Self> {
        Self::open_with(
            PathBuf::from(&object.url),
            (object.size, UNIX_EPOCH),
            &mut |range| object.read_for_footer(ends, range),
            columns,
            Some(object.clone()),
        )
    }

    /// Reads the footer through `read_at` and checks it, for a file of `bytes` bytes last
    /// modified at `modified`, catching a panic of the Parquet reader.
    fn open_with(
        path: PathBuf,
        (bytes, modified): (u64, SystemTime),
        read_at: &mut dyn FnMut(Range<u64>) -> Result<Vec<u8>>,
        columns: Option<&[String]>,
        #[cfg(feature = "remote")] remote: Option<RemoteObject>,
    ) -> Result<Self> {
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let footer = Footer::read_with(read_at, &path, bytes)?;
            let projection = Projection::new(&path, &footer.metadata, columns)?;
            let ranges = check_footer(
                &path,
                footer.metadata.metadata(),
                &projection.leaves,
                footer.bytes.start,
            )?;
            Ok((footer, projection, ranges))
        }));
        let (footer, projection, ranges) = opened.unwrap_or_else(|payload| {
            Err(Error::CorruptParquet {
                path: path.clone(),
                row_group: None,
                column: None,
                reason: format!(
                    "the Parquet reader panicked reading the footer: {}",
                    kiln_ml_core::panic_message(payload.as_ref())
                ),
            })
        })?;
        Ok(Self {
            path,
            bytes,
            modified,
            vouched: Vouched::default(),
            footer,
            projection,
            ranges,
            #[cfg(feature = "remote")]
            remote,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Rows of each row group, in file order (checked when opened: not negative, and equal to
    /// the value count of every non-repeated column chunk).
    pub(crate) fn row_group_rows(&self) -> Vec<u64> {
        self.footer
            .metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|group| group.num_rows().max(0) as u64)
            .collect()
    }

    /// The uncompressed size of one row group's projected column chunks, as the footer states
    /// it: about what its decoded columns take in memory.
    pub(crate) fn row_group_bytes(&self, row_group: usize) -> Option<u64> {
        let group = self
            .footer
            .metadata
            .metadata()
            .row_groups()
            .get(row_group)?;
        let bytes = self
            .projection
            .leaves
            .iter()
            .filter_map(|&leaf| group.columns().get(leaf))
            .map(|chunk| chunk.uncompressed_size().max(0) as u64)
            // Saturating: the sizes are the footer's claims, and a wild one must not wrap.
            .fold(0u64, u64::saturating_add);
        Some(bytes)
    }

    /// The file's identity: path, size, modification time (to the nanosecond) and a hash of
    /// its footer, so a rewrite that keeps the size and the modification time (`cp -p`) still
    /// changes it when its footer differs (statistics, compressed sizes), which is all but a
    /// rewrite of uncompressed values that leaves every statistic alone.
    pub(crate) fn identity(&self) -> Fingerprint {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            // An object's entity tag (or modification time) names its version.
            return Fingerprint::builder()
                .str("parquet-object")
                .str(&remote.url)
                .u64(self.bytes)
                .str(remote.version())
                .fingerprint(self.footer.hash)
                .finish();
        }
        let since_epoch = self.modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Fingerprint::builder()
            .str("parquet-file")
            .str(&self.path.to_string_lossy())
            .u64(self.bytes)
            .u64(since_epoch.as_secs())
            .u64(u64::from(since_epoch.subsec_nanos()))
            .fingerprint(self.footer.hash)
            .finish()
    }

    /// Reads one row group's projected columns (one sequential read per group of nearby column
    /// chunks) and decodes them in chunks of at most [`DECODE_CHUNK_ROWS`] rows.
    ///
    /// Returns the chunks, in row order, and the number of bytes read from disk; the bytes read
    /// are freed before the chunks are returned, so they never coexist with what a decoder
    /// makes of the chunks. Fails, naming the file, the row group and the failing column, on a
    /// page that does not decode: a failed page checksum, a corrupt page, a panic of the
    /// Parquet reader, or fewer or more rows than the footer promises.
    pub(crate) fn read_row_group(
        &self,
        row_group: usize,
        pending: Option<PendingRead>,
    ) -> Result<(Vec<RecordBatch>, u64)> {
        let reader = self.fetch(row_group, pending)?;
        let bytes_read = reader.held_bytes();
        let corrupt = |reason: String| Error::CorruptParquet {
            path: self.path.clone(),
            row_group: Some(row_group),
            column: self.failing_column(&reader, row_group),
            reason,
        };
        let mut decoding = self
            .chunks(reader.clone(), row_group, self.projection.mask.clone())
            .map_err(corrupt)?;
        // Grown chunk by chunk: never sized by the footer's row count.
        let mut chunks = Vec::new();
        let mut rows = 0u64;
        while let Some(chunk) = next_chunk(&mut decoding).map_err(corrupt)? {
            rows += chunk.num_rows() as u64;
            chunks.push(chunk);
        }
        let promised = self
            .footer
            .metadata
            .metadata()
            .row_group(row_group)
            .num_rows();
        if i64::try_from(rows) != Ok(promised) {
            return Err(corrupt(format!(
                "decoded {rows} rows but the footer promises {promised}"
            )));
        }
        Ok((chunks, bytes_read))
    }

    /// Fails when the file's size, modification time or footer changed since it was opened:
    /// its footer (and any cache keyed by its identity) would no longer describe it. The footer
    /// is read again only while no change stamp vouches for the file (see `change_stamp.rs`).
    fn check_unchanged(&self, file: &mut File) -> Result<()> {
        let checked_at = SystemTime::now();
        let (bytes, modified, stamp) = identity_of(file, &self.path)?;
        let reason = if bytes != self.bytes {
            format!("it had {} bytes and now has {bytes}", self.bytes)
        } else if modified != self.modified {
            "its modification time changed".to_owned()
        } else if self.vouched.vouches_for(stamp) {
            return Ok(());
        } else if !self.footer.is_unchanged_in(file, &self.path)? {
            "its footer changed (same size and modification time)".to_owned()
        } else {
            // Read before the comparison, so a change after it moves the stamp again.
            self.vouched.footer_matched(stamp, checked_at);
            return Ok(());
        };
        Err(Error::FileChanged {
            path: self.path.clone(),
            reason,
        })
    }

    /// The bytes of a row group's projected column chunks: read from the local file (after
    /// checking it did not change), fetched from the object store, or taken from a fetch
    /// started earlier by [`start_fetch`](Self::start_fetch) (fetched again if that failed, so
    /// a store that failed a read-ahead and came back is read afresh).
    fn fetch(&self, row_group: usize, pending: Option<PendingRead>) -> Result<RangeReader> {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            if let Some(pending) = pending
                && let Ok(held) = remote.join_read(pending, row_group)
            {
                return Ok(RangeReader::new(held, self.bytes));
            }
            let held = remote.read_ranges(self.row_group_ranges(row_group)?.to_vec(), row_group)?;
            return Ok(RangeReader::new(held, self.bytes));
        }
        // A local read starts nothing ahead.
        let _local = pending;
        let mut file =
            File::open(&self.path).map_err(|source| Error::io("opening", &self.path, source))?;
        self.check_unchanged(&mut file)?;
        self.read_range(&mut file, row_group)
    }

    /// Whether the file lives in an object store (whose reads are worth starting early).
    pub(crate) fn is_remote(&self) -> bool {
        #[cfg(feature = "remote")]
        return self.remote.is_some();
        #[cfg(not(feature = "remote"))]
        false
    }

    /// Starts fetching a row group of an object-store file on the store's runtime; `None` for
    /// a local file (or a row group that does not exist), whose reads are cheap to start.
    pub(crate) fn start_fetch(&self, row_group: usize) -> Option<PendingRead> {
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            let ranges = self.row_group_ranges(row_group).ok()?.to_vec();
            return Some(remote.spawn_read(ranges, row_group));
        }
        let _ = row_group;
        None
    }

    /// The byte ranges of a row group's projected column chunks, coalesced (see
    /// [`check_footer`], which checked them against the file when it was opened).
    fn row_group_ranges(&self, row_group: usize) -> Result<&[Range<u64>]> {
        self.ranges
            .get(row_group)
            .map(Vec::as_slice)
            .ok_or_else(|| Error::CorruptParquet {
                path: self.path.clone(),
                row_group: Some(row_group),
                column: None,
                reason: "no such row group".to_owned(),
            })
    }

    /// Reads the projected column chunks of a row group: one sequential read per group of
    /// nearby chunks ([`row_group_ranges`](Self::row_group_ranges)).
    fn read_range(&self, file: &mut File, row_group: usize) -> Result<RangeReader> {
        let mut held = Vec::new();
        for range in self.row_group_ranges(row_group)?.iter().cloned() {
            let start = range.start;
            held.push((start, Bytes::from(read_at(file, &self.path, range)?)));
        }
        Ok(RangeReader::new(held, self.bytes))
    }

    /// A reader decoding a row group under a projection, [`DECODE_CHUNK_ROWS`] rows at a time.
    fn chunks(
        &self,
        reader: RangeReader,
        row_group: usize,
        mask: ProjectionMask,
    ) -> std::result::Result<ParquetRecordBatchReader, String> {
        // The reader sizes its buffers by the batch size: no larger than the row group (whose
        // row count was checked when the file was opened).
        let rows = self
            .footer
            .metadata
            .metadata()
            .row_group(row_group)
            .num_rows();
        let batch_rows = usize::try_from(rows).map_or(1, |rows| rows.clamp(1, DECODE_CHUNK_ROWS));
        guarded(|| {
            ParquetRecordBatchReaderBuilder::new_with_metadata(reader, self.footer.metadata.clone())
                .with_row_groups(vec![row_group])
                .with_projection(mask)
                .with_batch_size(batch_rows)
                .build()
                .map_err(|error| error.to_string())
        })
    }

    /// After a failed decode, the first projected column that fails on its own, if any: the
    /// error path only, so the cost of decoding column by column does not matter.
    fn failing_column(&self, reader: &RangeReader, row_group: usize) -> Option<String> {
        let descriptor = self.footer.metadata.parquet_schema();
        self.projection.leaves.iter().find_map(|&leaf| {
            let mask = ProjectionMask::leaves(descriptor, [leaf]);
            let fails = self
                .chunks(reader.clone(), row_group, mask)
                .and_then(|mut chunks| while_ok(&mut chunks))
                .is_err();
            fails.then(|| descriptor.column(leaf).path().string())
        })
    }
}

/// The next decoded chunk, with the reader's errors and panics as text.
fn next_chunk(
    chunks: &mut ParquetRecordBatchReader,
) -> std::result::Result<Option<RecordBatch>, String> {
    guarded(|| chunks.next().transpose().map_err(|error| error.to_string()))
}

/// Decodes every chunk, keeping none.
fn while_ok(chunks: &mut ParquetRecordBatchReader) -> std::result::Result<(), String> {
    while next_chunk(chunks)?.is_some() {}
    Ok(())
}

/// Runs a call into the Parquet reader, turning its panic (malformed pages can make it
/// index out of bounds) into an error.
fn guarded<T>(
    call: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|payload| {
        Err(format!(
            "the Parquet reader panicked: {}",
            kiln_ml_core::panic_message(payload.as_ref())
        ))
    })
}

/// A local file's size, modification time and change stamp, from one `fstat`.
fn identity_of(file: &File, path: &Path) -> Result<(u64, SystemTime, Option<ChangeStamp>)> {
    let metadata = file
        .metadata()
        .map_err(|source| Error::io("inspecting", path, source))?;
    let modified = metadata
        .modified()
        .map_err(|source| Error::io("reading the modification time of", path, source))?;
    Ok((metadata.len(), modified, ChangeStamp::of(&metadata)))
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch};
    use parquet::arrow::ArrowWriter;

    use super::*;
    use crate::parquet_source::footer::COMPARISONS;

    fn comparisons() -> u64 {
        COMPARISONS.with(|count| count.get())
    }

    /// Block reads of an unchanged local file cost one `fstat`, not a read of its footer, once
    /// its last change settled; a moved change stamp (a chmod here) has the footer compared
    /// until the change settles, and the reads go on.
    #[test]
    fn an_unchanged_file_is_read_without_reading_its_footer_again() {
        let settle = || std::thread::sleep(std::time::Duration::from_millis(150));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ids.parquet");
        let ids = Int64Array::from_iter_values(0..100);
        let batch = RecordBatch::try_from_iter([("id", Arc::new(ids) as _)]).unwrap();
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        settle();

        let file = ParquetFile::open(&path, None).unwrap();
        let before = comparisons();
        for _ in 0..3 {
            let (chunks, _) = file.read_row_group(0, None).unwrap();
            assert_eq!(chunks[0].num_rows(), 100);
        }
        assert_eq!(
            comparisons(),
            before,
            "no footer read for an unchanged file"
        );

        let mut permissions = std::fs::metadata(&path).unwrap().permissions();
        permissions.set_mode(0o600);
        std::fs::set_permissions(&path, permissions).unwrap();
        file.read_row_group(0, None).unwrap();
        file.read_row_group(0, None).unwrap();
        assert_eq!(
            comparisons(),
            before + 2,
            "compared while the chmod is fresh"
        );
        settle();
        file.read_row_group(0, None).unwrap();
        file.read_row_group(0, None).unwrap();
        assert_eq!(
            comparisons(),
            before + 3,
            "compared once more, then vouched for by the new stamp"
        );
    }
}
