//! The read path alone: every block of 66 files read once on one thread with
//! `ParquetSource::read_block` (open the file, check it did not change since its footer was
//! read, read the row group's column chunks, decode them, one `ArrowRow` per row). The files
//! have the `block_shuffle` example's columns (an `Int64` id, 16 `Float32` features, an `Int64`
//! label), Snappy, row groups of at most 1,024 rows, at its mean file size: 1,364 rows each, so
//! two blocks a file, of 1,024 and 340 rows (the example's files range about 20x around it).
//!
//! A second group reads one file of 512 row groups of 1,024 rows (the same columns), whose
//! footer (about 1.5 MB of column-chunk metadata) outweighs each row group's bytes: what a
//! per-read check of the footer would cost there.
//!
//! Run: `cargo bench -p kiln-ml-data --bench read_block`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_ml_core::{BlockIndex, BlockLayout, BlockSource};
use kiln_ml_data::ParquetSource;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

const FILES: u64 = 66;
const ROWS_PER_FILE: u64 = 1_364;

/// A reproducible stream of values in [-2, 2) (xorshift64*): features as random as the
/// example's, so their pages encode alike.
struct Values(u64);

impl Values {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    }
}

/// Row groups in the file of the second group.
const MANY_ROW_GROUPS: u64 = 512;

/// Writes file `file` of `rows` rows in row groups of at most 1,024 rows.
fn write_file(dir: &Path, file: u64, rows: u64, values: &mut Values) {
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(1_024))
        .build();
    let first = (file * rows) as i64;
    let mut columns: Vec<(String, ArrayRef)> = vec![(
        "id".to_owned(),
        Arc::new(Int64Array::from_iter_values(first..first + rows as i64)),
    )];
    for feature in 0..16 {
        let array = Float32Array::from_iter_values((0..rows).map(|_| values.next()));
        columns.push((format!("f{feature}"), Arc::new(array)));
    }
    let labels = (0..rows as i64).map(|row| (row * 7 + file as i64) % 10);
    columns.push((
        "label".to_owned(),
        Arc::new(Int64Array::from_iter_values(labels)),
    ));
    let batch = RecordBatch::try_from_iter(columns).expect("columns of one length");
    let path = dir.join(format!("part-{file:05}.parquet"));
    let out = std::fs::File::create(&path).expect("a writable temporary folder");
    let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(properties)).expect("a writer");
    writer.write(&batch).expect("the batch is written");
    writer.close().expect("the file is closed");
}

fn write_files(dir: &Path) {
    let mut values = Values(42);
    for file in 0..FILES {
        write_file(dir, file, ROWS_PER_FILE, &mut values);
    }
}

/// Reads every block of `source` once.
fn read_every_block(source: &ParquetSource) {
    for block in 0..source.num_blocks() as BlockIndex {
        black_box(source.read_block(block).expect("the block reads"));
    }
}

fn read_block(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    write_files(dir.path());
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .expect("the files open");
    let blocks = source.num_blocks() as BlockIndex;
    assert_eq!(u64::from(blocks), FILES * 2, "two row groups a file");
    let mut group = c.benchmark_group("read_block");
    group.throughput(Throughput::Elements(FILES * ROWS_PER_FILE));
    group.sample_size(30);
    group.bench_function("every block once", |b| b.iter(|| read_every_block(&source)));
    group.finish();
}

fn read_block_many_row_groups(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    write_file(dir.path(), 0, MANY_ROW_GROUPS * 1_024, &mut Values(7));
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .expect("the file opens");
    assert_eq!(source.num_blocks() as u64, MANY_ROW_GROUPS);
    let mut group = c.benchmark_group("read_block_many_row_groups");
    group.throughput(Throughput::Elements(MANY_ROW_GROUPS * 1_024));
    group.sample_size(10);
    group.bench_function("every block once", |b| b.iter(|| read_every_block(&source)));
    group.finish();
}

criterion_group!(benches, read_block, read_block_many_row_groups);
criterion_main!(benches);
