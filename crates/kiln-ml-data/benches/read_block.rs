//! The read path alone: every block of 66 files read once on one thread with
//! `ParquetSource::read_block` (open the file, check it did not change since its footer was
//! read, read the row group's column chunks, decode them, one `ArrowRow` per row). The files
//! have the `block_shuffle` example's columns (an `Int64` id, 16 `Float32` features, an `Int64`
//! label), Snappy, row groups of at most 1,024 rows, at its mean file size: 1,364 rows each, so
//! two blocks a file, of 1,024 and 340 rows (the example's files range about 20x around it).
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

fn write_files(dir: &Path) {
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(1_024))
        .build();
    let mut values = Values(42);
    for file in 0..FILES {
        let first = (file * ROWS_PER_FILE) as i64;
        let mut columns: Vec<(String, ArrayRef)> = vec![(
            "id".to_owned(),
            Arc::new(Int64Array::from_iter_values(
                first..first + ROWS_PER_FILE as i64,
            )),
        )];
        for feature in 0..16 {
            let array = Float32Array::from_iter_values((0..ROWS_PER_FILE).map(|_| values.next()));
            columns.push((format!("f{feature}"), Arc::new(array)));
        }
        let labels = (0..ROWS_PER_FILE as i64).map(|row| (row * 7 + file as i64) % 10);
        columns.push((
            "label".to_owned(),
            Arc::new(Int64Array::from_iter_values(labels)),
        ));
        let batch = RecordBatch::try_from_iter(columns).expect("columns of one length");
        let path = dir.join(format!("part-{file:05}.parquet"));
        let out = std::fs::File::create(&path).expect("a writable temporary folder");
        let mut writer =
            ArrowWriter::try_new(out, batch.schema(), Some(properties.clone())).expect("a writer");
        writer.write(&batch).expect("the batch is written");
        writer.close().expect("the file is closed");
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
    group.bench_function("every block once", |b| {
        b.iter(|| {
            for block in 0..blocks {
                black_box(source.read_block(block).expect("the block reads"));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, read_block);
criterion_main!(benches);
