//! Files that make the Parquet reader panic, or recurse until the stack overflows (which
//! aborts the process): caught or refused, and named.

use std::path::Path;
use std::sync::Arc;

use kiln_ml_core::{BlockLayout, BlockSource};
use kiln_ml_data::arrow_array::{Float64Array, Int64Array, RecordBatch};
use kiln_ml_data::arrow_schema::{DataType, Field, Schema};
use kiln_ml_data::parquet::arrow::ArrowWriter;
use kiln_ml_data::parquet::basic::{Compression, Encoding, Repetition, Type as PhysicalType};
use kiln_ml_data::parquet::file::metadata::{FileMetaData, ParquetMetaData, ParquetMetaDataWriter};
use kiln_ml_data::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use kiln_ml_data::parquet::schema::types::{ColumnPath, SchemaDescriptor, Type};
use kiln_ml_data::{Error, ParquetSource};

use crate::common::write_ids;
use crate::rewrite::{footer, page_header_sizes, read_zigzag};

/// 8 rows: `id` (plain) and `x` (doubles, `BYTE_STREAM_SPLIT`, data page v2), then the
/// value count in the header of `x`'s page raised from 8 to 63 (one byte, nothing moves).
///
/// parquet 60's byte-stream-split decoder then indexes past its buffer and panics (the same
/// edit as apache/arrow-rs#11121).
fn write_overcounted_page(path: &Path) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Float64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..8)),
            Arc::new(Float64Array::from_iter_values((0..8).map(f64::from))),
        ],
    )
    .unwrap();
    let properties = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_compression(Compression::UNCOMPRESSED)
        .set_column_encoding(ColumnPath::from("x"), Encoding::BYTE_STREAM_SPLIT)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let mut bytes = std::fs::read(path).unwrap();
    let (metadata, _) = footer(&bytes);
    let start = metadata.row_group(0).column(1).data_page_offset() as usize;
    let (_, fields_end) = page_header_sizes(&bytes[start..]);
    let v2 = start + fields_end;
    // Field 8 (`data_page_header_v2`, a struct), then its field 1 (`num_values`, i32).
    assert_eq!(bytes[v2..v2 + 2], [0x5C, 0x15], "a data page v2 header");
    assert_eq!(read_zigzag(&bytes, v2 + 2), (8, v2 + 3));
    bytes[v2 + 2] = 63 << 1;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_page_that_panics_the_parquet_reader_is_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overcounted.parquet");
    write_overcounted_page(&path);
    let source = ParquetSource::builder().file(&path).build().unwrap();
    // Before: the panic unwound out of `read_block` (and a direct caller went down with it).
    for error in [
        source.read_block(0).map(drop).unwrap_err(),
        source.read_record_batch(0).map(drop).unwrap_err(),
    ] {
        let message = error.to_string();
        assert!(
            matches!(
                &error,
                Error::CorruptParquet { row_group: Some(0), column: Some(column), .. }
                    if column == "x"
            ),
            "{message}"
        );
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("panicked"), "{message}");
    }
    // The column that decodes is still served on its own.
    let ids = ParquetSource::builder()
        .file(&path)
        .columns(["id"])
        .build()
        .unwrap();
    assert_eq!(ids.read_block(0).unwrap().len(), 8);
}

/// A footer whose schema nests `depth` optional groups around one leaf, and no row groups.
///
/// Built on a thread with a large stack: the schema types are built, written and dropped
/// recursively.
fn write_deep_schema(path: &Path, depth: usize) {
    let path = path.to_owned();
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let mut node = Type::primitive_type_builder("leaf", PhysicalType::INT32)
                .with_repetition(Repetition::OPTIONAL)
                .build()
                .unwrap();
            for level in 0..depth {
                node = Type::group_type_builder(&format!("g{level}"))
                    .with_repetition(Repetition::OPTIONAL)
                    .with_fields(vec![Arc::new(node)])
                    .build()
                    .unwrap();
            }
            let root = Type::group_type_builder("schema")
                .with_fields(vec![Arc::new(node)])
                .build()
                .unwrap();
            let schema = Arc::new(SchemaDescriptor::new(Arc::new(root)));
            let metadata =
                ParquetMetaData::new(FileMetaData::new(1, 0, None, None, schema, None), vec![]);
            let mut bytes = b"PAR1".to_vec();
            ParquetMetaDataWriter::new(&mut bytes, &metadata)
                .finish()
                .unwrap();
            std::fs::write(path, bytes).unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_schema_nested_deeper_than_a_stack_can_parse_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_ids(&dir.path().join("a.parquet"), 0..10, 5);
    write_ids(&dir.path().join("c.parquet"), 10..20, 5);
    // 10,000 levels: a 120 KB footer. Before: the parse overflowed a rayon thread's stack and
    // the process aborted ("has overflowed its stack").
    let deep = dir.path().join("b.parquet");
    write_deep_schema(&deep, 10_000);
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, Error::CorruptParquet { path, row_group: None, .. }
            if path == &deep.canonicalize().unwrap()),
        "{message}"
    );
    assert!(message.contains("nests 129 levels deep"), "{message}");

    // Nesting that real schemas use is accepted.
    let nested = dir.path().join("nested.parquet");
    write_deep_schema(&nested, 100);
    let source = ParquetSource::builder().file(&nested).build().unwrap();
    assert_eq!(source.num_samples(), 0);
    assert!(source.read_block(0).is_err(), "no blocks");
}
