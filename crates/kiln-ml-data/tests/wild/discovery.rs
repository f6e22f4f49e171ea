//! Dataset directories as other tools leave them: their own `_`/`.` entries, links, and Hive
//! partition directories.

use std::os::unix::fs::symlink;
use std::path::Path;

use kiln_ml_core::{BlockLayout, BlockSource, ReadError};
use kiln_ml_data::arrow_array::cast::AsArray;
use kiln_ml_data::arrow_array::types::Int64Type;
use kiln_ml_data::arrow_array::{Array, RecordBatch, StringArray};
use kiln_ml_data::{DecodeError, Error, ParquetSource, column, decoder_fn, required_values};

use crate::common::{id_decoder, schema_refusal, write_ids};

/// Every id of the source, in layout order.
fn all_ids<S: BlockSource<Item = i64> + BlockLayout>(source: &S) -> Vec<i64> {
    (0..source.num_blocks() as u32)
        .flat_map(|block| source.read_block(block).unwrap())
        .collect()
}

fn mkdir_write(path: &Path, ids: std::ops::Range<i64>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_ids(path, ids, 100);
}

#[test]
fn other_tools_underscore_and_dot_entries_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    mkdir_write(&root.join("part-0.parquet"), 0..10);
    mkdir_write(&root.join("sub/part-1.parquet"), 10..20);
    // Real Parquet files that are not data: Delta's checkpoint, Spark's uncommitted task
    // output, a summary file, a hidden copy; and Spark's empty marker.
    mkdir_write(
        &root.join("_delta_log/00000000000000000010.checkpoint.parquet"),
        100..105,
    );
    mkdir_write(
        &root.join("_temporary/0/task_0001/part-0.parquet"),
        200..203,
    );
    mkdir_write(&root.join("_metadata"), 300..301);
    mkdir_write(&root.join("_part-9.parquet"), 400..401);
    mkdir_write(&root.join(".staging/part-0.parquet"), 500..502);
    std::fs::write(root.join("_SUCCESS"), b"").unwrap();
    std::fs::write(root.join("._part-0.parquet"), b"\0\x05\x16\x07 AppleDouble").unwrap();

    let expected: Vec<i64> = (0..20).collect();
    let by_dir = ParquetSource::builder()
        .dir(root)
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(all_ids(&by_dir), expected);
    let everything = format!("{}/**/*", root.display());
    let by_glob = ParquetSource::builder()
        .glob(everything)
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(all_ids(&by_glob), expected);
    let top = format!("{}/*", root.display());
    let by_top_glob = ParquetSource::builder()
        .glob(top)
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(all_ids(&by_top_glob), (0..10).collect::<Vec<_>>());
    // A pattern that spells such a name reads it; so does an explicit file.
    let spelled = format!("{}/_delta_log/*.parquet", root.display());
    let checkpoint = ParquetSource::builder()
        .glob(spelled)
        .file(root.join("_metadata"))
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(all_ids(&checkpoint), [100, 101, 102, 103, 104, 300]);
}

#[test]
fn linked_directories_and_files_are_followed_once_through_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let outside = dir.path().join("elsewhere");
    mkdir_write(&root.join("real/part-0.parquet"), 0..5);
    mkdir_write(&outside.join("shard/part-1.parquet"), 5..10);
    mkdir_write(&outside.join("one.parquet"), 10..12);
    symlink(outside.join("shard"), root.join("b_linked_dir")).unwrap();
    symlink(outside.join("one.parquet"), root.join("c_linked.parquet")).unwrap();
    // Two cycles: back to the root, and a directory to itself.
    symlink(&root, root.join("real/loop")).unwrap();
    symlink(".", root.join("real/self")).unwrap();
    // A second way to the same files: read once.
    symlink(outside.join("shard"), root.join("d_same_shard")).unwrap();

    let source = ParquetSource::builder()
        .dir(&root)
        .build_with(id_decoder())
        .unwrap();
    // Path order of the paths walked: b_linked_dir/, c_linked.parquet, real/.
    let expected: Vec<i64> = (5..10).chain(10..12).chain(0..5).collect();
    assert_eq!(all_ids(&source), expected);
    let paths: Vec<_> = source.paths().collect();
    assert_eq!(paths.len(), 3);
    assert!(
        paths[0].ends_with("elsewhere/shard/part-1.parquet"),
        "{paths:?}"
    );
    assert!(paths[1].ends_with("elsewhere/one.parquet"), "{paths:?}");
    let glob = format!("{}/**/*.parquet", root.display());
    let globbed = ParquetSource::builder()
        .glob(glob)
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(all_ids(&globbed), expected);

    // A link to nothing where data is expected is refused, naming the link.
    let broken = dir.path().join("broken");
    mkdir_write(&broken.join("part-0.parquet"), 0..5);
    symlink(dir.path().join("gone"), broken.join("part-1.parquet")).unwrap();
    let error = ParquetSource::builder().dir(&broken).build().unwrap_err();
    assert!(
        matches!(error, Error::Read(ReadError::Io { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("part-1.parquet"), "{error}");
}

/// `(id, split, lang)` rows, with the partition columns read like any string column.
fn split_rows(batch: &RecordBatch) -> Result<Vec<(i64, String, Option<String>)>, DecodeError> {
    let ids = required_values::<Int64Type>(batch, "id")?;
    let split = column::<StringArray>(batch, "split")?;
    let lang = column::<StringArray>(batch, "lang")?;
    Ok((0..batch.num_rows())
        .map(|row| {
            let lang = lang.is_valid(row).then(|| lang.value(row).to_owned());
            (ids[row], split.value(row).to_owned(), lang)
        })
        .collect())
}

#[test]
fn hive_partition_directories_become_string_columns() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    mkdir_write(&root.join("split=train/lang=en/part-0.parquet"), 0..3);
    mkdir_write(&root.join("split=train/lang=pt%2DBR/part-0.parquet"), 3..5);
    mkdir_write(
        &root.join("split=valid/lang=__HIVE_DEFAULT_PARTITION__/part-0.parquet"),
        5..6,
    );
    let source = ParquetSource::builder()
        .dir(root)
        .build_with(decoder_fn("split-rows", 1, split_rows))
        .unwrap();
    let names: Vec<String> = source
        .schema()
        .fields()
        .iter()
        .map(|field| field.name().clone())
        .collect();
    assert_eq!(names, ["id", "x", "split", "lang"]);
    assert!(!source.schema().field(2).is_nullable());
    assert!(source.schema().field(3).is_nullable(), "one lang is null");
    let rows: Vec<_> = (0..source.num_blocks() as u32)
        .flat_map(|block| source.read_block(block).unwrap())
        .collect();
    let row = |id, split: &str, lang: Option<&str>| (id, split.to_owned(), lang.map(str::to_owned));
    assert_eq!(
        rows,
        [
            row(0, "train", Some("en")),
            row(1, "train", Some("en")),
            row(2, "train", Some("en")),
            row(3, "train", Some("pt-BR")),
            row(4, "train", Some("pt-BR")),
            row(5, "valid", None),
        ]
    );
    // Whole row groups carry them too, and a projection may name them, in any order.
    let projected = ParquetSource::builder()
        .dir(root)
        .columns(["split", "id"])
        .build()
        .unwrap();
    let batch = projected.read_record_batch(2).unwrap();
    assert_eq!(batch.schema(), projected.schema());
    assert_eq!(batch.column(0).as_string::<i32>().value(0), "valid");
    assert_eq!(batch.column(1).as_primitive::<Int64Type>().value(0), 5);
    // They are part of what identifies the data; they can be turned off.
    let plain = ParquetSource::builder()
        .dir(root)
        .hive_partitioning(false)
        .build()
        .unwrap();
    assert_eq!(plain.schema().fields().len(), 2);
    let all = ParquetSource::builder().dir(root).build().unwrap();
    assert_ne!(plain.fingerprint(), all.fingerprint());
}

#[test]
fn partition_directories_that_cannot_be_columns_are_refused() {
    // Some files partitioned and some not: their columns differ.
    let dir = tempfile::tempdir().unwrap();
    mkdir_write(&dir.path().join("a.parquet"), 0..2);
    mkdir_write(&dir.path().join("split=train/b.parquet"), 2..4);
    let message = schema_refusal(
        dir.path(),
        &dir.path().join("a.parquet"),
        &dir.path().join("split=train/b.parquet"),
    );
    assert!(
        message.contains("[split] but the reference's give []"),
        "{message}"
    );

    // A key that is also a column of the file: which one is meant cannot be told.
    let dir = tempfile::tempdir().unwrap();
    mkdir_write(&dir.path().join("id=7/a.parquet"), 0..2);
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::Partition { .. }), "{error}");
    assert!(
        error.to_string().contains("\"id\" is also a column"),
        "{error}"
    );
}
