//! `ParquetSource`: layout, projection, decoding, and errors that name the file, row group and
//! column.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{id_decoder, pair_decoder, write_batch, write_dataset, write_ids};
use kiln_ml_core::{BlockLayout, BlockSource, ReadError};
use kiln_ml_data::arrow_array::{Float32Array, Float64Array, Int64Array, RecordBatch};
use kiln_ml_data::parquet::file::reader::{FileReader, SerializedFileReader};
use kiln_ml_data::{Error, ParquetSource};

#[test]
fn row_groups_become_blocks_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), &[25, 10, 40], 10);
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build_with(id_decoder())
        .unwrap();
    let rows: Vec<u64> = source.blocks().iter().map(|block| block.rows).collect();
    assert_eq!(rows, [10, 10, 5, 10, 10, 10, 10, 10]);
    assert_eq!(source.num_files(), 3);
    assert_eq!(source.blocks()[3].file, 1);
    assert_eq!(source.blocks()[4].index_in_file, 0);
    for (index, block) in source.blocks().iter().enumerate() {
        let ids = source.read_block(index as u32).unwrap();
        let expected: Vec<i64> = block.samples().map(|id| id as i64).collect();
        assert_eq!(ids, expected, "block {index}");
    }
    assert!(source.bytes_read() > 0);
    assert!(source.path_of(3).unwrap().ends_with("part-001.parquet"));
}

#[test]
fn every_row_group_of_every_file_shares_the_sources_schema() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), &[25, 10], 10);
    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let schemas: Vec<_> = (0..source.num_blocks() as u32)
        .map(|block| source.read_block(block).unwrap()[0].schema())
        .collect();
    // One handle (a gather across chunks looks columns up in one schema), not one per read.
    assert!(
        schemas
            .iter()
            .all(|schema| Arc::ptr_eq(schema, &schemas[0]))
    );
    assert_eq!(schemas[0].field(0).name(), "id");
}

/// Files whose schemas differ only in their own metadata (pandas writes each file's row count
/// into it) still yield batches of the source's one schema.
#[test]
fn files_with_other_schema_metadata_share_the_sources_schema() {
    use kiln_ml_data::arrow_schema::{DataType, Field, Schema};
    let dir = tempfile::tempdir().unwrap();
    for (index, rows) in [25i64, 10].into_iter().enumerate() {
        let metadata = std::collections::HashMap::from([(
            "pandas".to_owned(),
            format!("{{\"stop\": {rows}}}"),
        )]);
        let schema =
            Schema::new(vec![Field::new("id", DataType::Int64, false)]).with_metadata(metadata);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap();
        write_batch(
            &dir.path().join(format!("part-{index}.parquet")),
            &batch,
            10,
        );
    }
    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    for block in 0..source.num_blocks() as u32 {
        let schema = source.read_block(block).unwrap()[0].schema();
        assert!(Arc::ptr_eq(&schema, &source.schema()), "block {block}");
        let whole = source.read_record_batch(block).unwrap();
        assert!(
            Arc::ptr_eq(&whole.schema(), &source.schema()),
            "block {block}"
        );
    }
}

#[test]
fn files_globs_and_projection() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), &[5, 7], 100);
    // An explicit list keeps its order.
    let reversed = ParquetSource::builder()
        .files([&paths[1], &paths[0]])
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(reversed.read_block(0).unwrap()[0], 5);
    let globbed = ParquetSource::builder()
        .glob(format!("{}/part-*.parquet", dir.path().display()))
        .columns(["x"])
        .build()
        .unwrap();
    assert_eq!(globbed.schema().fields().len(), 1);
    assert_eq!(globbed.schema().field(0).name(), "x");
    let rows = globbed.read_block(1).unwrap();
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0].num_columns(), 1);
    let whole = globbed.read_record_batch(1).unwrap();
    assert_eq!(whole.num_rows(), 7);
    let all_columns = ParquetSource::builder().dir(dir.path()).build().unwrap();
    assert_ne!(all_columns.fingerprint(), globbed.fingerprint());
    assert_ne!(
        all_columns.fingerprint(),
        ParquetSource::builder()
            .dir(dir.path())
            .build_with(pair_decoder())
            .unwrap()
            .fingerprint(),
        "the decoder is part of the identity"
    );
}

#[test]
fn fingerprint_follows_file_identity() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), &[20], 10);
    let open = || ParquetSource::builder().dir(dir.path()).build().unwrap();
    let before = open().fingerprint();
    assert_eq!(before, open().fingerprint(), "stable while nothing changes");
    let file = std::fs::File::options()
        .write(true)
        .open(&paths[0])
        .unwrap();
    let modified = file.metadata().unwrap().modified().unwrap();
    file.set_modified(modified + Duration::from_secs(1))
        .unwrap();
    assert_ne!(
        before,
        open().fingerprint(),
        "a new modification time is a new identity"
    );
}

#[test]
fn a_truncated_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), &[30, 30], 10);
    let length = std::fs::metadata(&paths[1]).unwrap().len();
    let file = std::fs::File::options()
        .write(true)
        .open(&paths[1])
        .unwrap();
    file.set_len(length / 2).unwrap();
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::CorruptParquet { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("part-001.parquet"), "{message}");
    assert!(message.contains("truncated"), "{message}");
}

#[test]
fn a_file_truncated_after_opening_is_named_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), &[30], 10);
    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    common::truncate_to_half(&paths[0]);
    let error = source.read_block(2).unwrap_err();
    assert!(matches!(error, Error::FileChanged { .. }), "{error}");
    assert!(error.to_string().contains("part-000.parquet"), "{error}");
}

#[test]
fn a_projection_skips_the_columns_between_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.parquet");
    let rows = 50_000;
    // The middle column is incompressible noise, so its chunk (about 400 KB) is far wider than
    // the gap across which nearby chunks are read together.
    let noise = (0..rows).map(|i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64);
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(0..rows as i64)) as _,
        ),
        ("wide", Arc::new(Float64Array::from_iter_values(noise)) as _),
        (
            "x",
            Arc::new(Float32Array::from_iter_values((0..rows).map(|i| i as f32))) as _,
        ),
    ])
    .unwrap();
    write_batch(&path, &batch, rows as usize);
    let wide_chunk = {
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        reader.metadata().row_group(0).column(1).byte_range().1
    };
    assert!(wide_chunk > 300_000, "{wide_chunk}");

    let all = ParquetSource::builder().file(&path).build().unwrap();
    all.read_block(0).unwrap();
    let projected = ParquetSource::builder()
        .file(&path)
        .columns(["id", "x"])
        .build_with(pair_decoder())
        .unwrap();
    let pairs = projected.read_block(0).unwrap();
    assert_eq!(pairs.len(), rows as usize);
    assert_eq!(pairs[12_345], (12_345, 12_345.0));
    assert!(
        projected.bytes_read() + wide_chunk <= all.bytes_read(),
        "the projection read {} bytes, all columns {}, the skipped chunk has {wide_chunk}",
        projected.bytes_read(),
        all.bytes_read()
    );
}

#[test]
fn corrupt_pages_name_file_row_group_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), &[30], 10);
    let (start, _) = {
        let reader = SerializedFileReader::new(std::fs::File::open(&paths[0]).unwrap()).unwrap();
        reader.metadata().row_group(1).column(1).byte_range()
    };
    let mut bytes = std::fs::read(&paths[0]).unwrap();
    bytes[start as usize..start as usize + 16].fill(0xff);
    std::fs::write(&paths[0], &bytes).unwrap();
    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    assert!(source.read_block(0).is_ok(), "other row groups still read");
    let error = source.read_block(1).unwrap_err();
    match &error {
        Error::CorruptParquet {
            path,
            row_group,
            column,
            ..
        } => {
            assert!(path.ends_with("part-000.parquet"));
            assert_eq!(*row_group, Some(1));
            assert_eq!(column.as_deref(), Some("x"));
        }
        other => panic!("expected a corrupt-file error, got {other}"),
    }
}

#[test]
fn a_non_parquet_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.parquet"), b"id,x\n1,2\n").unwrap();
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::NotParquet { .. }), "{error}");
    assert!(error.to_string().contains("notes.parquet"), "{error}");
}

#[test]
fn differing_schemas_name_both_files_and_the_column() {
    let dir = tempfile::tempdir().unwrap();
    write_ids(&dir.path().join("a.parquet"), 0..5, 10);
    let other = RecordBatch::try_from_iter([
        ("id", Arc::new(Float64Array::from(vec![1.0, 2.0])) as _),
        (
            "x",
            Arc::new(kiln_ml_data::arrow_array::Float32Array::from(vec![
                0.5, 1.0,
            ])) as _,
        ),
    ])
    .unwrap();
    write_batch(&dir.path().join("b.parquet"), &other, 10);
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, Error::SchemaMismatch { .. }), "{message}");
    assert!(
        message.contains("b.parquet") && message.contains("a.parquet"),
        "{message}"
    );
    assert!(message.contains("column \"id\" is Float64"), "{message}");
    // Projecting away the differing column makes the files compatible.
    let source = ParquetSource::builder()
        .dir(dir.path())
        .columns(["x"])
        .build()
        .unwrap();
    assert_eq!(source.num_samples(), 7);
}

#[test]
fn a_missing_column_is_named_with_the_available_ones() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), &[5], 10);
    let error = ParquetSource::builder()
        .dir(dir.path())
        .columns(["id", "speed"])
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, Error::MissingColumn { .. }), "{message}");
    assert!(message.contains("\"speed\""), "{message}");
    assert!(message.contains("part-000.parquet"), "{message}");
    assert!(message.contains("id, x"), "{message}");
}

#[test]
fn rejected_nulls_name_file_row_group_column_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<Option<i64>> = (0..20).map(|id| (id != 13).then_some(id)).collect();
    let batch = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(ids)) as _)]).unwrap();
    write_batch(&dir.path().join("nulls.parquet"), &batch, 10);
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build_with(id_decoder())
        .unwrap();
    assert!(source.read_block(0).is_ok());
    let error = source.read_block(1).unwrap_err();
    match &error {
        Error::Decode {
            path,
            row_group,
            column,
            row,
            ..
        } => {
            assert!(path.ends_with("nulls.parquet"));
            assert_eq!(*row_group, 1);
            assert_eq!(column.as_deref(), Some("id"));
            assert_eq!(*row, Some(3));
        }
        other => panic!("expected a decode error, got {other}"),
    }
    assert!(error.to_string().contains("null values"), "{error}");
}

/// A row group of more than 8,192 rows decodes in chunks: a null in the second chunk is named
/// by its row in the row group, not in the chunk; the chunks join in order as one batch.
#[test]
fn a_null_past_the_first_decode_chunk_is_named_by_its_row_in_the_row_group() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 20_000;
    let ids: Vec<Option<i64>> = (0..rows).map(|id| (id != 10_000).then_some(id)).collect();
    let batch = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(ids)) as _)]).unwrap();
    write_batch(&dir.path().join("long.parquet"), &batch, rows as usize);
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(source.num_blocks(), 1);
    let error = source.read_block(0).unwrap_err();
    match &error {
        Error::Decode { row_group, row, .. } => {
            assert_eq!(*row_group, 0);
            assert_eq!(*row, Some(10_000), "{error}");
        }
        other => panic!("expected a decode error, got {other}"),
    }
    let whole = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let joined = whole.read_record_batch(0).unwrap();
    assert_eq!(joined, batch);
}

#[test]
fn block_indices_past_the_end_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), &[5], 10);
    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let error = source.read_block(1).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Read(ReadError::NoSuchBlock {
                block: 1,
                blocks: 1
            })
        ),
        "{error}"
    );
}

/// A row group's size comes from the footer, for the projected columns only: what lets the
/// loader bound its memory in bytes.
#[test]
fn block_bytes_are_the_projected_columns_uncompressed_size() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), &[300, 200], 100);
    let all = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let only_x = ParquetSource::builder()
        .dir(dir.path())
        .columns(["x"])
        .build()
        .unwrap();
    for block in 0..all.num_blocks() as u32 {
        let (whole, x) = (
            all.block_bytes(block).unwrap(),
            only_x.block_bytes(block).unwrap(),
        );
        assert!(x > 0 && x < whole, "block {block}: {x} of {whole}");
    }
    assert_eq!(all.block_bytes(99), None);
}

/// Sizes kept on disk are used for the same files and read again when a file changes, and a
/// directory that cannot be written is named.
#[test]
fn kept_sample_sizes_follow_the_files() {
    let data = tempfile::tempdir().unwrap();
    let kept = tempfile::tempdir().unwrap();
    let path = data.path().join("events.parquet");
    write_ids(&path, 0..30, 10);
    let sizes = || {
        ParquetSource::builder()
            .dir(data.path())
            .sample_sizes_kept("id", kept.path())
            .unwrap()
    };
    let expected: Vec<u64> = (0..30).collect();
    assert_eq!(sizes(), (expected.clone(), false));
    assert_eq!(sizes(), (expected, true));
    // Another file in its place: other row groups, sizes read afresh.
    write_ids(&path, 5..25, 7);
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    let modified = file.metadata().unwrap().modified().unwrap();
    file.set_modified(modified + Duration::from_secs(2))
        .unwrap();
    assert_eq!(sizes(), ((5..25).collect(), false));
    // Not a directory: the error names the path.
    let blocked = data.path().join("events.parquet");
    let error = ParquetSource::builder()
        .dir(data.path())
        .sample_sizes_kept("id", blocked.join("sizes"))
        .unwrap_err();
    assert!(matches!(error, Error::SizesNotKept { .. }), "{error}");
    assert!(error.to_string().contains("events.parquet"), "{error}");
}
