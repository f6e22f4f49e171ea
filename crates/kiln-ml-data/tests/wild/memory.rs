//! Memory by bytes: one huge row group (4,000,000 rows of 4 columns) read through the default
//! decoder peaks under 3x its decoded size.
//!
//! Peak memory is a process-wide figure, so the read runs in a child process (this test binary
//! again, running only the ignored `measure_child` test) whose peak resident size
//! (`VmHWM`) covers nothing but opening the file and reading the block.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use kiln_ml_core::BlockSource;
use kiln_ml_data::ParquetSource;
use kiln_ml_data::arrow_array::{Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch};

const ROWS: usize = 4_000_000;
/// Bytes per row of the four columns once decoded: i64 + f64 + f32 + i32.
const ROW_BYTES: usize = 8 + 8 + 4 + 4;
const FILE_VAR: &str = "KILN_WILD_MEMORY_FILE";

/// Writes the huge row group: one row group of `ROWS` rows, no compression (the worst case
/// for the bytes held while reading).
fn write_huge_row_group(path: &Path) {
    let ids = 0..ROWS as i64;
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids.clone())) as _,
        ),
        (
            "x",
            Arc::new(Float64Array::from_iter_values(
                ids.clone().map(|i| i as f64 * 0.5),
            )) as _,
        ),
        (
            "y",
            Arc::new(Float32Array::from_iter_values(
                ids.clone().map(|i| (i % 1000) as f32),
            )) as _,
        ),
        (
            "z",
            Arc::new(Int32Array::from_iter_values(ids.map(|i| (i % 7) as i32))) as _,
        ),
    ])
    .unwrap();
    crate::common::write_batch(path, &batch, ROWS);
}

/// The peak resident size of this process so far, from `/proc/self/status`.
fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_huge_row_group_peaks_under_three_times_its_decoded_size() {
    if peak_resident_bytes().is_none() {
        eprintln!("no /proc/self/status here: the peak cannot be measured");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.parquet");
    write_huge_row_group(&path);
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "memory::measure_child",
            "--ignored",
            "--nocapture",
        ])
        .env(FILE_VAR, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let peak: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("PEAK_BYTES="))
        .expect("the child reports its peak")
        .trim()
        .parse()
        .unwrap();
    let decoded = (ROWS * ROW_BYTES) as u64;
    println!(
        "peak {:.0} MB for {:.0} MB decoded",
        peak as f64 / 1e6,
        decoded as f64 / 1e6
    );
    assert!(
        peak < 3 * decoded,
        "reading peaked at {peak} bytes, {:.2}x the {decoded} decoded bytes",
        peak as f64 / decoded as f64
    );
}

/// The child: opens the file named by the environment, reads its one block with the default
/// decoder, checks it, and prints its peak resident size. Ignored unless run by the test above.
#[test]
#[ignore = "run by a_huge_row_group_peaks_under_three_times_its_decoded_size in a child process"]
fn measure_child() {
    let path = std::env::var(FILE_VAR).expect("run by the parent test");
    let source = ParquetSource::builder().file(&path).build().unwrap();
    let rows = source.read_block(0).unwrap();
    assert_eq!(rows.len(), ROWS);
    let last = rows[ROWS - 1].column("id").unwrap();
    let last = last.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(last.value(0), ROWS as i64 - 1);
    println!("PEAK_BYTES={}", peak_resident_bytes().unwrap());
    drop(rows);
}
