//! Damage only a check can see: page bytes that fail their checksum, footers whose row counts
//! or column chunk places lie, and rewrites that keep a file's size and modification time.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use kiln_ml_cache::{Cached, DiskCache};
use kiln_ml_core::{BlockLayout, BlockSource, transform_fn};
use kiln_ml_data::arrow_array::builder::{Int64Builder, ListBuilder};
use kiln_ml_data::arrow_array::{Int64Array, RecordBatch};
use kiln_ml_data::parquet::basic::Compression;
use kiln_ml_data::parquet::file::metadata::RowGroupMetaData;
use kiln_ml_data::parquet::file::properties::WriterProperties;
use kiln_ml_data::{Error, ParquetSource};

use crate::common::{id_decoder, ids_batch, pair_decoder};
use crate::rewrite::{
    add_page_checksums, edit_column_chunk, edit_row_group, flip_byte, footer, page_header_sizes,
    write_single_pages,
};

/// Every `(id, x)` of the source, block by block.
fn read_all<D: kiln_ml_data::RowDecoder>(source: &ParquetSource<D>) -> Vec<D::Item> {
    (0..source.num_blocks() as u32)
        .flat_map(|block| source.read_block(block).unwrap())
        .collect()
}

/// The build error for a file, checked to be `CorruptParquet` naming the file, the row group
/// and the column given.
fn refusal(path: &Path, row_group: usize, column: Option<&str>) -> String {
    let error = ParquetSource::builder().file(path).build().unwrap_err();
    let message = error.to_string();
    match &error {
        Error::CorruptParquet {
            path: named,
            row_group: named_group,
            column: named_column,
            ..
        } => {
            assert_eq!(named, path, "{message}");
            assert_eq!(*named_group, Some(row_group), "{message}");
            assert_eq!(named_column.as_deref(), column, "{message}");
        }
        _ => panic!("expected CorruptParquet, got {message}"),
    }
    message
}

/// A file of 3 row groups of 250 rows: `id` 0..750 and `x`.
fn three_row_groups(path: &Path) {
    write_single_pages(path, &ids_batch(0..750), 250, Compression::SNAPPY);
}

#[test]
fn a_page_whose_checksum_fails_is_refused_naming_file_row_group_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checksummed.parquet");
    write_single_pages(&path, &ids_batch(0..300), 100, Compression::UNCOMPRESSED);
    add_page_checksums(&path);

    // Pages whose checksums hold read as written.
    let source = ParquetSource::builder()
        .file(&path)
        .build_with(pair_decoder())
        .unwrap();
    let expected: Vec<(i64, f32)> = (0..300).map(|id| (id, id as f32 / 2.0)).collect();
    assert_eq!(read_all(&source), expected);

    // One byte of a value in row group 1's `x` page: a different, valid-looking float.
    let bytes = std::fs::read(&path).unwrap();
    let (metadata, _) = footer(&bytes);
    let chunk = metadata.row_group(1).column(1);
    let end = (chunk.data_page_offset() + chunk.compressed_size()) as usize;
    let ([_, _, page_bytes], _) = page_header_sizes(&bytes[chunk.data_page_offset() as usize..]);
    assert!(page_bytes > 4 * 10);
    flip_byte(&path, end - 4 * 10 + 2);

    let source = ParquetSource::builder().file(&path).build().unwrap();
    assert_eq!(
        source.read_block(0).unwrap().len(),
        100,
        "row group 0 is intact"
    );
    let error = source.read_block(1).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            Error::CorruptParquet { row_group: Some(1), column: Some(column), .. } if column == "x"
        ),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("CRC"), "{message}");
    assert!(
        source.read_record_batch(1).is_err(),
        "never served as a batch either"
    );
}

#[test]
fn a_negative_row_count_is_refused_when_the_source_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("negative.parquet");
    three_row_groups(&path);
    edit_row_group(&path, 1, |group| with_rows(group, -100));
    // Before: clamped to 0 rows, and an epoch delivered 500 of 750 rows without an error.
    let message = refusal(&path, 1, None);
    assert!(message.contains("-100 rows"), "{message}");
}

#[test]
fn a_row_count_that_differs_from_its_columns_is_refused_however_large() {
    for claimed in [1_000_000_000_000, 251, 249] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims.parquet");
        three_row_groups(&path);
        edit_row_group(&path, 2, |group| with_rows(group, claimed));
        // Before: 10^12 rows went into the layout, for the decoder and the sampler to allocate.
        let message = refusal(&path, 2, Some("id"));
        assert!(
            message.contains(&format!("{claimed} rows")) && message.contains("250 values"),
            "{message}"
        );
    }
}

#[test]
fn a_column_chunk_outside_the_file_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("misplaced.parquet");
    three_row_groups(&path);
    let footer_start = footer(&std::fs::read(&path).unwrap()).1 as i64;
    for offset in [-7, 0, footer_start, footer_start + 1_000_000] {
        three_row_groups(&path);
        edit_column_chunk(&path, 2, 1, |chunk| chunk.set_data_page_offset(offset));
        // Before: an offset into the footer was read and decoded as a page.
        let message = refusal(&path, 2, Some("x"));
        assert!(message.contains("column chunk"), "{offset}: {message}");
    }
}

/// Nullable columns holding nulls count one value per row (nulls included), lists at least one
/// per row (empty and null lists included): both pass the footer checks and read back exactly.
#[test]
fn nulls_and_lists_pass_the_footer_checks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nulls_and_lists.parquet");
    let mut lists = ListBuilder::new(Int64Builder::new());
    for id in 0..40i64 {
        match id % 3 {
            0 => lists.append_null(),
            1 => lists.append_value([]),
            _ => lists.append_value([Some(id), None, Some(id + 1)]),
        }
    }
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter(
                (0..40).map(|id| (id % 4 != 0).then_some(id)),
            )) as _,
        ),
        ("pairs", Arc::new(lists.finish()) as _),
    ])
    .unwrap();
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(16))
        .build();
    let file = std::fs::File::create(&path).unwrap();
    let mut writer =
        kiln_ml_data::parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties))
            .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let source = ParquetSource::builder().file(&path).build().unwrap();
    assert_eq!(source.num_samples(), 40);
    let rows: Vec<u64> = source.blocks().iter().map(|block| block.rows).collect();
    assert_eq!(rows, [16, 16, 8]);
    for (index, block) in source.blocks().iter().enumerate() {
        let read = source.read_record_batch(index as u32).unwrap();
        let written = batch.slice(block.first_sample as usize, block.rows as usize);
        assert_eq!(read.columns(), written.columns(), "block {index}");
    }
}

#[test]
fn a_same_size_rewrite_that_keeps_the_modification_time_is_noticed() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("part-0.parquet");
    // Plain, uncompressed, with statistics: other values, the same size.
    let write = |ids: std::ops::Range<i64>| {
        let properties = WriterProperties::builder()
            .set_dictionary_enabled(false)
            .set_compression(Compression::UNCOMPRESSED)
            .build();
        let batch = ids_batch(ids);
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = kiln_ml_data::parquet::arrow::ArrowWriter::try_new(
            file,
            batch.schema(),
            Some(properties),
        )
        .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    };
    write(0..100);
    let before = std::fs::metadata(&path).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let to_u64 = transform_fn("to-u64", 1, |id: i64| Ok::<_, Infallible>(id as u64));
    let cached = |source| {
        Cached::new(
            source,
            to_u64.clone(),
            DiskCache::open(cache.path()).unwrap(),
        )
    };
    let ids = || {
        ParquetSource::builder()
            .dir(data.path())
            .build_with(id_decoder())
            .unwrap()
    };
    let old = ids();
    let old_fingerprint = old.fingerprint();
    cached(ids()).warm().unwrap();

    // `cp -p` of a file of the same size: new bytes, the old modification time.
    write(100..200);
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    drop(file);
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(after.len(), before.len(), "the rewrite keeps the size");
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());

    // The source built before the rewrite refuses to read against its stale footer.
    let error = old.read_block(0).unwrap_err();
    assert!(
        matches!(&error, Error::FileChanged { reason, .. } if reason.contains("footer")),
        "{error}"
    );
    // A source built after it has another identity, so the cache misses instead of serving
    // the old values.
    let new = ids();
    assert_ne!(new.fingerprint(), old_fingerprint);
    let cached = cached(new);
    assert_eq!(cached.read_block(0).unwrap()[0], 100);
    assert_eq!(cached.stats().disk_hits, 0);
}

fn with_rows(group: RowGroupMetaData, rows: i64) -> RowGroupMetaData {
    group.into_builder().set_num_rows(rows).build().unwrap()
}

/// Column chunks claiming sizes near `i64::MAX` (the footer's word, not checked against the
/// file): three of them sum past `u64::MAX`, and the row group's size saturates instead of
/// wrapping (a panic in debug builds, a small size and the deepest prefetch in release); the
/// rows still read.
#[test]
fn column_chunk_sizes_near_the_maximum_saturate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge_sizes.parquet");
    let ids = Int64Array::from_iter_values(0..600);
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(ids.clone()) as _),
        ("a", Arc::new(ids.clone()) as _),
        ("b", Arc::new(ids) as _),
    ])
    .unwrap();
    write_single_pages(&path, &batch, 200, Compression::SNAPPY);
    for column in 0..3 {
        edit_column_chunk(&path, 1, column, |chunk| {
            chunk.set_total_uncompressed_size(i64::MAX)
        });
    }
    let source = ParquetSource::builder()
        .file(&path)
        .build_with(id_decoder())
        .unwrap();
    assert_eq!(source.block_bytes(1), Some(u64::MAX));
    assert!(source.block_bytes(0).unwrap() < 1 << 20);
    assert_eq!(read_all(&source), (0..600).collect::<Vec<i64>>());
}
