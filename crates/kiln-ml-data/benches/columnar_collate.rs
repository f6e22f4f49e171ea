//! The loader workers' columnar collation of one batch: 64 rows of the `block_shuffle`
//! example's columns (an `Int64` id, 16 `Float32` features, an `Int64` label) gathered from
//! decoded chunks of 1,024 rows ([`gather_rows`], every column), then turned into a row-major
//! feature matrix ([`float_matrix`]) and a label vector ([`int_vector`]), as the example's
//! collation does for every batch.
//!
//! - `sequential`: 64 consecutive rows of one chunk (a zero-copy slice);
//! - `shuffled`: one row from each of 64 chunks (the staged, row-major gather);
//! - `float_matrix`: `float_matrix` alone (its name lookups and the copy), on 64 rows already
//!   gathered.
//!
//! Run: `cargo bench -p kiln-ml-data --bench columnar_collate`.

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use criterion::{Criterion, criterion_group, criterion_main};
use kiln_ml_data::{ArrowRow, ArrowRows, RowDecoder, float_matrix, gather_rows, int_vector};

const CHUNKS: usize = 64;
const CHUNK_ROWS: usize = 1024;
const BATCH: usize = 64;
const FEATURES: [&str; 16] = [
    "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "f11", "f12", "f13", "f14",
    "f15",
];

/// Feature `feature` of row `row` of chunk `index`: every value distinct, so the check before
/// timing would see a misplaced one.
fn value(index: usize, row: usize, feature: usize) -> f32 {
    (index * CHUNK_ROWS + row) as f32 + feature as f32 / 16.0
}

/// A decoded chunk.
fn chunk(index: usize) -> RecordBatch {
    let first = (index * CHUNK_ROWS) as i64;
    let ids = Int64Array::from_iter_values(first..first + CHUNK_ROWS as i64);
    let mut columns: Vec<(&str, ArrayRef)> = vec![("id", Arc::new(ids))];
    for (feature, &name) in FEATURES.iter().enumerate() {
        let values = (0..CHUNK_ROWS).map(|row| value(index, row, feature));
        columns.push((name, Arc::new(Float32Array::from_iter_values(values))));
    }
    let labels = (0..CHUNK_ROWS).map(|row| (row % 10) as i64);
    columns.push(("label", Arc::new(Int64Array::from_iter_values(labels))));
    RecordBatch::try_from_iter(columns).expect("columns of one length")
}

/// Checks one collated batch against the rows it was made of: `(chunk, row)` each.
fn check(batch: &(Vec<f32>, Vec<i64>), rows: &[(usize, usize)]) {
    let expected: Vec<f32> = rows
        .iter()
        .flat_map(|&(index, row)| (0..FEATURES.len()).map(move |f| value(index, row, f)))
        .collect();
    assert_eq!(batch.0, expected, "the feature matrix");
    let labels: Vec<i64> = rows.iter().map(|&(_, row)| (row % 10) as i64).collect();
    assert_eq!(batch.1, labels, "the labels");
}

/// What the example's collation makes of a batch's rows.
fn collate(rows: &[ArrowRow]) -> (Vec<f32>, Vec<i64>) {
    let columns = gather_rows(rows)
        .expect("chunks of one schema")
        .expect("a batch has rows");
    let features = float_matrix(&columns, &FEATURES).expect("Float32 features");
    let labels = int_vector(&columns, "label").expect("an Int64 label");
    (features, labels)
}

fn columnar_collate(c: &mut Criterion) {
    let mut chunks: Vec<Vec<ArrowRow>> = Vec::with_capacity(CHUNKS);
    for index in 0..CHUNKS {
        let mut rows = Vec::with_capacity(CHUNK_ROWS);
        ArrowRows
            .decode(&chunk(index), &mut rows)
            .expect("plain columns decode");
        chunks.push(rows);
    }
    let sequential_places: Vec<(usize, usize)> = (100..100 + BATCH).map(|row| (0, row)).collect();
    // Row 7 * i + 3 of chunk i: every row from another chunk, as under a block shuffle.
    let shuffled_places: Vec<(usize, usize)> =
        (0..BATCH).map(|i| (i, (7 * i + 3) % CHUNK_ROWS)).collect();
    let rows_at = |places: &[(usize, usize)]| -> Vec<ArrowRow> {
        places
            .iter()
            .map(|&(index, row)| chunks[index][row].clone())
            .collect()
    };
    let (sequential, shuffled) = (rows_at(&sequential_places), rows_at(&shuffled_places));
    check(&collate(&sequential), &sequential_places);
    check(&collate(&shuffled), &shuffled_places);
    let gathered = gather_rows(&sequential)
        .expect("chunks of one schema")
        .expect("a batch has rows");

    let mut group = c.benchmark_group("columnar_collate");
    group.bench_function("sequential", |b| b.iter(|| collate(black_box(&sequential))));
    group.bench_function("shuffled", |b| b.iter(|| collate(black_box(&shuffled))));
    group.bench_function("float_matrix", |b| {
        b.iter(|| float_matrix(black_box(&gathered), &FEATURES).expect("Float32 features"))
    });
    group.finish();
}

criterion_group!(benches, columnar_collate);
criterion_main!(benches);
