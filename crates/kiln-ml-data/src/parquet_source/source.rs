//! `ParquetSource`: Parquet files as a block layout and block source, one row group per block.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use kiln_ml_core::{Block, BlockIndex, BlockLayout, BlockSource, Fingerprint, Layout, ReadError};
use rayon::prelude::*;

use super::discover::discover;
use super::file::{ParquetFile, PendingRead};
use super::input::{Found, Input};
use super::source_schema::SourceSchema;
use super::url_input::RemoteSettings;
use crate::{ArrowRows, Error, Result, RetryPolicy, RowDecoder};

/// Row groups of object-store files fetched ahead of their reads at most (the loader asks for
/// its read-ahead; more is refused and read when needed).
const MAX_PENDING_READS: usize = 64;

/// A dataset of Parquet files read one whole row group at a time.
///
/// Each row group is a block of the [`BlockLayout`]; every footer is read once when the source
/// is built, checked against its file (row counts, column chunk places, codecs) and kept, so a
/// block read is a sequential read of the row group's projected column chunks (one per group of
/// chunks at most 64 KiB apart) followed by a decode in chunks of at most 8,192 rows, never a
/// row at a time. Page checksums are verified where the writer stored them. Rows become items
/// through a [`RowDecoder`] (by default [`ArrowRows`], one compact `ArrowRow` per row); whole
/// row groups are available as Arrow batches through
/// [`read_record_batch`](Self::read_record_batch).
///
/// The layout fingerprint covers each file's path, size, modification time and a hash of its
/// footer, the row-group sizes, the columns as decoded (names, order, types, partition values)
/// and the decoder's fingerprint, so caches keyed by it never serve data from a changed file. A
/// file that changes after the source was built (size, modification time or footer) is refused
/// with [`Error::FileChanged`].
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_core::{BlockLayout, BlockSource};
/// use kiln_ml_data::arrow_array::{Int64Array, RecordBatch};
/// use kiln_ml_data::parquet::arrow::ArrowWriter;
/// use kiln_ml_data::ParquetSource;
///
/// let dir = tempfile::tempdir().unwrap();
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(Int64Array::from_iter_values(0..10)) as _),
/// ]).unwrap();
/// let file = std::fs::File::create(dir.path().join("part-0.parquet")).unwrap();
/// let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
/// writer.write(&batch).unwrap();
/// writer.close().unwrap();
///
/// let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
/// assert_eq!(source.num_samples(), 10);
/// let rows = source.read_block(0).unwrap();
/// assert_eq!(rows.len(), 10);
/// ```
#[derive(Debug)]
pub struct ParquetSource<D = ArrowRows> {
    files: Vec<ParquetFile>,
    layout: Layout,
    fingerprint: Fingerprint,
    schema: SourceSchema,
    decoder: D,
    bytes_read: AtomicU64,
    /// Object-store row groups being fetched ahead of their reads, by block.
    pending: Mutex<HashMap<BlockIndex, PendingRead>>,
}

/// Chooses the files and columns of a [`ParquetSource`].
#[derive(Debug, Clone, Default)]
pub struct ParquetSourceBuilder {
    inputs: Vec<Input>,
    columns: Option<Vec<String>>,
    no_partitions: bool,
    remote: RemoteSettings,
}

impl ParquetSourceBuilder {
    /// Adds one file, whatever its extension.
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(Input::File(path.into()));
        self
    }

    /// Adds files in the given order.
    pub fn files<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.inputs
            .extend(paths.into_iter().map(|path| Input::File(path.into())));
        self
    }

    /// Adds every `*.parquet` (or `*.parq`, in any case) file under a directory, recursively,
    /// in path order.
    ///
    /// Names starting with `_` or `.` are skipped (`_delta_log`, `_temporary`, `.staging`),
    /// links are followed, and `key=value` directories below `path` become string columns
    /// (see [`hive_partitioning`](Self::hive_partitioning)).
    pub fn dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(Input::Dir(path.into()));
        self
    }

    /// Adds every file matching a glob pattern (`data/**/*.parquet`), in path order.
    ///
    /// Directories are walked as for [`dir`](Self::dir): below the pattern's fixed prefix,
    /// names starting with `_` or `.` are skipped unless the pattern spells them
    /// (`data/_staging/*.parquet`), and `key=value` directories become columns.
    pub fn glob(mut self, pattern: impl Into<String>) -> Self {
        self.inputs.push(Input::Glob(pattern.into()));
        self
    }

    /// Adds files by URL: `s3://bucket/prefix/` (S3 and S3-compatible stores), `gs://`,
    /// `az://` (also `abfs://`, `azure://`), `http://` or `https://`, through the
    /// [`object_store`](https://docs.rs/object_store) crate, each behind its crate feature
    /// (`s3`, `gcs`, `azure`, `http`); `file://` URLs are local paths and always work.
    ///
    /// A URL whose key ends in `.parquet` or `.parq` (without a trailing `/`) is one object, or
    /// where no such object exists, the prefix of the directory so named; any other is a prefix, and
    /// every Parquet object under it is read, in path order (part by part, as a directory of
    /// the same files is walked: `en/` before `en-US/`), skipping keys with a part that
    /// starts with `_` or `.` and turning `key=value` parts into columns, as for
    /// [`dir`](Self::dir). Credentials and settings come from the environment as
    /// `object_store` reads them (`AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ENDPOINT`,
    /// `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`...), then from
    /// [`store_option`](Self::store_option).
    ///
    /// The URLs of one bucket (container, web server) share one store: one client, connection
    /// pool and I/O runtime. Footers are fetched once, many at a time, when the source is built
    /// (one request for each object's last 64 KiB and first bytes). A block read fetches the row group's
    /// projected column chunks (coalesced, all at once); the loader starts those fetches ahead
    /// of the reads ([`BlockSource::prefetch`]), so many row groups are in flight while the
    /// workers decode. Requests are retried by the [`retry`](Self::retry) policy; an object
    /// that changed since the source was built (size or entity tag) is refused with
    /// [`Error::FileChanged`].
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.inputs.push(Input::Url(url.into()));
        self
    }

    /// An `object_store` configuration key and value for the stores of [`url`](Self::url)
    /// inputs, applied after the environment: `aws_endpoint`, `aws_allow_http`,
    /// `aws_region`, `google_service_account`, `azure_storage_account_name`, `timeout`,
    /// `connect_timeout`, ... An unknown key fails the build, naming it.
    pub fn store_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.remote.options.push((key.into(), value.into()));
        self
    }

    /// How object-store requests are retried (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.remote.retry = policy;
        self
    }

    /// Decodes only these top-level columns, in this order (all columns when never called;
    /// partition keys may be named too).
    pub fn columns<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Whether Hive partition directories (`split=train/`) below a [`dir`](Self::dir) or a
    /// glob's fixed prefix become columns (default: yes). Each key becomes a string column
    /// after the file's columns, holding the directory's value (percent-decoded; null for
    /// `__HIVE_DEFAULT_PARTITION__`).
    pub fn hive_partitioning(mut self, enabled: bool) -> Self {
        self.no_partitions = !enabled;
        self
    }

    /// Opens every file and reads its footer, with rows as [`ArrowRow`](crate::ArrowRow)s.
    pub fn build(self) -> Result<ParquetSource<ArrowRows>> {
        self.build_with(ArrowRows)
    }

    /// Opens every file and reads its footer (in parallel), with rows decoded by `decoder`.
    ///
    /// Fails with an error naming the file for a missing file, a non-Parquet or truncated file,
    /// a missing column, or a schema that differs from the first file's (columns are matched
    /// by name, with the equivalences `docs/data.md` lists: list child names, dictionary or
    /// plain, nullability). A footer is refused, naming the row group and column, when a row
    /// count is negative or differs from its column chunks' value counts, when a projected
    /// column chunk lies outside the file's data, or when its codec is not compiled in
    /// ([`Error::UnsupportedCodec`]); a panic of the Parquet reader on a malformed footer is
    /// caught and reported as [`Error::CorruptParquet`].
    pub fn build_with<D: RowDecoder>(self, decoder: D) -> Result<ParquetSource<D>> {
        let found = discover(&self.inputs, !self.no_partitions, &self.remote)?;
        // Partition keys are not columns of the files: only the rest is projected in them.
        let file_columns: Option<Vec<String>> = self.columns.as_ref().map(|columns| {
            columns
                .iter()
                .filter(|column| {
                    !found
                        .iter()
                        .any(|found| found.partitions.value(column).is_some())
                })
                .cloned()
                .collect()
        });
        let files = open_files(&found, file_columns.as_deref())?;
        let schema = SourceSchema::new(&files, &found, self.columns.as_deref())?;
        let mut builder = Layout::builder();
        let mut samples = 0u64;
        for file in &files {
            let rows = file.row_group_rows();
            // Each count was checked against its column chunks; their sum must still fit.
            samples = rows
                .iter()
                .try_fold(samples, |sum, &rows| sum.checked_add(rows))
                .ok_or_else(|| Error::CorruptParquet {
                    path: file.path().to_owned(),
                    row_group: None,
                    column: None,
                    reason: "its row counts take the dataset past 2^64 rows".to_owned(),
                })?;
            builder.add_file(file.identity(), &rows);
        }
        let layout = builder.build()?;
        let fingerprint = source_fingerprint(&layout, &schema, &decoder);
        Ok(ParquetSource {
            files,
            layout,
            fingerprint,
            schema,
            decoder,
            bytes_read: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
        })
    }
}

/// Opens every file (in parallel) and reads its footer; an object's ends are fetched first,
/// many at a time.
fn open_files(found: &[Found], columns: Option<&[String]>) -> Result<Vec<ParquetFile>> {
    #[cfg(feature = "remote")]
    let ends = {
        let objects: Vec<_> = found
            .iter()
            .filter_map(|found| found.remote.as_ref())
            .collect();
        let mut ends = super::remote::fetch_all_ends(&objects).into_iter();
        found
            .iter()
            .map(|found| found.remote.as_ref().and_then(|_| ends.next()).transpose())
            .collect::<Result<Vec<_>>>()?
    };
    let opened: Vec<Result<ParquetFile>> = found
        .par_iter()
        .enumerate()
        .map(|(_index, found)| {
            #[cfg(feature = "remote")]
            if let (Some(object), Some(ends)) = (&found.remote, &ends[_index]) {
                return ParquetFile::open_remote(object, ends, columns);
            }
            ParquetFile::open(&found.path, columns)
        })
        .collect();
    opened.into_iter().collect()
}

/// The layout, the columns as decoded (names, order, types; partition values) and the decoder.
fn source_fingerprint(
    layout: &Layout,
    schema: &SourceSchema,
    decoder: &impl RowDecoder,
) -> Fingerprint {
    Fingerprint::builder()
        .str("kiln-data parquet source")
        .fingerprint(layout.fingerprint())
        .fingerprint(schema.fingerprint())
        .fingerprint(decoder.fingerprint())
        .finish()
}

impl ParquetSource<ArrowRows> {
    /// Starts choosing files and columns.
    pub fn builder() -> ParquetSourceBuilder {
        ParquetSourceBuilder::default()
    }
}

impl<D: RowDecoder> ParquetSource<D> {
    /// The same files and columns with another decoder (no file is reopened).
    pub fn with_decoder<E: RowDecoder>(self, decoder: E) -> ParquetSource<E> {
        let fingerprint = source_fingerprint(&self.layout, &self.schema, &decoder);
        ParquetSource {
            files: self.files,
            layout: self.layout,
            fingerprint,
            schema: self.schema,
            decoder,
            bytes_read: self.bytes_read,
            pending: self.pending,
        }
    }

    /// The files, in layout order (file id `i` is the `i`-th: `paths().nth(i)`).
    pub fn paths(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.files.iter().map(ParquetFile::path)
    }

    /// The file a block belongs to.
    pub fn path_of(&self, block: BlockIndex) -> Option<&Path> {
        let block = self.layout.blocks().get(block as usize)?;
        self.files.get(block.file as usize).map(ParquetFile::path)
    }

    /// The Arrow schema of every decoded batch: the projected columns, then any partition
    /// columns (files are checked to agree with it when the source is built).
    pub fn schema(&self) -> SchemaRef {
        self.schema.schema().clone()
    }

    /// The decoder.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// Bytes read from disk by block reads so far (footers excluded).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// One whole row group (block) as a single Arrow batch of [`schema`](Self::schema).
    ///
    /// A row group of more than 8,192 rows is decoded in chunks that are then joined, so it
    /// briefly takes twice its decoded size; [`read_block`](BlockSource::read_block) does not.
    pub fn read_record_batch(&self, block: BlockIndex) -> Result<RecordBatch> {
        let (file, row_group, mut chunks) = self.read_chunks(block)?;
        match chunks.len() {
            0 => Ok(RecordBatch::new_empty(self.schema())),
            1 => Ok(chunks.swap_remove(0)),
            _ => arrow_select::concat::concat_batches(&self.schema(), &chunks).map_err(|error| {
                Error::CorruptParquet {
                    path: file.path().to_owned(),
                    row_group: Some(row_group),
                    column: None,
                    reason: format!("cannot join the decoded chunks: {error}"),
                }
            }),
        }
    }

    /// The fetch started ahead for `block`, taken out of the pending reads. Only object-store
    /// files have any: a local block's read (the loader's hot path) takes no lock.
    fn take_pending(&self, file: &ParquetFile, block: BlockIndex) -> Option<PendingRead> {
        if !file.is_remote() {
            return None;
        }
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&block)
    }

    /// Reads and decodes one block's row group in bounded chunks, each in the source schema
    /// (columns by name, in the source's order, with the file's partition values); counts the
    /// bytes read. Returns the file and row group with the chunks.
    fn read_chunks(&self, block: BlockIndex) -> Result<(&ParquetFile, usize, Vec<RecordBatch>)> {
        let (file, row_group) = self.locate(block)?;
        let id = self
            .layout
            .blocks()
            .get(block as usize)
            .map_or(0, |found| found.file as usize);
        let pending = self.take_pending(file, block);
        let (chunks, bytes) = file.read_row_group(row_group, pending)?;
        self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
        let chunks = chunks
            .into_iter()
            .map(|chunk| self.schema.conform(id, chunk, file.path(), row_group))
            .collect::<Result<_>>()?;
        Ok((file, row_group, chunks))
    }

    fn locate(&self, block: BlockIndex) -> Result<(&ParquetFile, usize)> {
        let no_such_block = || {
            Error::Read(ReadError::NoSuchBlock {
                block,
                blocks: self.layout.num_blocks(),
            })
        };
        let Block {
            file,
            index_in_file,
            ..
        } = *self
            .layout
            .blocks()
            .get(block as usize)
            .ok_or_else(no_such_block)?;
        let file = self.files.get(file as usize).ok_or_else(no_such_block)?;
        Ok((file, index_in_file as usize))
    }
}

impl<D> BlockLayout for ParquetSource<D> {
    fn blocks(&self) -> &[Block] {
        self.layout.blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn num_files(&self) -> usize {
        self.layout.num_files()
    }
    fn describe_block(&self, block: BlockIndex) -> String {
        let found = self.layout.blocks().get(block as usize);
        match found.and_then(|found| Some((found, self.files.get(found.file as usize)?))) {
            Some((found, file)) => format!(
                "block {block} (row group {} of {})",
                found.index_in_file,
                file.path().display()
            ),
            None => self.layout.describe_block(block),
        }
    }
    /// The row group's uncompressed size of the projected columns, from the footer.
    fn block_bytes(&self, block: BlockIndex) -> Option<u64> {
        let found = self.layout.blocks().get(block as usize)?;
        let file = self.files.get(found.file as usize)?;
        file.row_group_bytes(found.index_in_file as usize)
    }
}

impl<D: RowDecoder> BlockSource for ParquetSource<D> {
    type Item = D::Item;
    type Error = Error;

    /// Starts fetching an object-store row group now, on the store's runtime, so that its
    /// [`read_block`](BlockSource::read_block) finds the bytes in (a local file: nothing).
    fn prefetch(&self, block: BlockIndex) {
        // A local read is cheap to start when its turn comes: no lock on the loader's path.
        let Ok((file, row_group)) = self.locate(block) else {
            return;
        };
        if !file.is_remote() {
            return;
        }
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pending.len() >= MAX_PENDING_READS || pending.contains_key(&block) {
            return;
        }
        if let Some(read) = file.start_fetch(row_group) {
            pending.insert(block, read);
        }
    }

    /// Stops the fetch started for `block` and drops its bytes.
    fn cancel_prefetch(&self, block: BlockIndex) {
        let Ok((file, _)) = self.locate(block) else {
            return;
        };
        let cancelled = self.take_pending(file, block);
        #[cfg(feature = "remote")]
        if let Some(read) = cancelled {
            read.abort();
        }
        #[cfg(not(feature = "remote"))]
        let _ = cancelled;
    }

    fn read_block(&self, block: BlockIndex) -> Result<Vec<D::Item>> {
        let (file, row_group, chunks) = self.read_chunks(block)?;
        let decode_error = |column, row, reason| Error::Decode {
            path: file.path().to_owned(),
            row_group,
            column,
            row,
            reason,
        };
        // Sized by the rows decoded, not by the footer's claim.
        let mut items = Vec::with_capacity(chunks.iter().map(RecordBatch::num_rows).sum());
        let mut first_row = 0;
        for chunk in &chunks {
            let before = items.len();
            self.decoder.decode(chunk, &mut items).map_err(|error| {
                decode_error(
                    error.column().map(str::to_owned),
                    error.row().map(|row| first_row + row),
                    error.reason().to_owned(),
                )
            })?;
            let produced = items.len().checked_sub(before);
            if produced != Some(chunk.num_rows()) {
                return Err(decode_error(
                    None,
                    None,
                    format!(
                        "the decoder produced {} items for {} rows (it must produce one per row)",
                        items.len() as i128 - before as i128,
                        chunk.num_rows()
                    ),
                ));
            }
            first_row += chunk.num_rows() as u64;
        }
        Ok(items)
    }
}
