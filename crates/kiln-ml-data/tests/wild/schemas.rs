//! Files of one dataset whose schemas differ in ways writers differ: column order, list child
//! names, dictionary encoding, nullability; and differences that change the data.

use std::path::Path;
use std::sync::Arc;

use kiln_ml_core::{BlockLayout, BlockSource};
use kiln_ml_data::arrow_array::builder::{Int64Builder, ListBuilder};
use kiln_ml_data::arrow_array::cast::AsArray;
use kiln_ml_data::arrow_array::types::{Int32Type, Int64Type};
use kiln_ml_data::arrow_array::{
    Array, ArrayRef, DictionaryArray, Float32Array, Float64Array, Int64Array, ListArray,
    RecordBatch, StringArray,
};
use kiln_ml_data::arrow_schema::{DataType, Field};
use kiln_ml_data::{Error, ParquetSource, column};

use crate::common::{id_decoder, pair_decoder, schema_refusal, write_batch, write_ids};

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap()
}

fn ids(values: std::ops::Range<i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

/// Lists `[id, id + 1]` per id, with the child field named `child`.
fn pairs_list(values: std::ops::Range<i64>, child: &str) -> ArrayRef {
    let mut builder = ListBuilder::new(Int64Builder::new()).with_field(Arc::new(Field::new(
        child,
        DataType::Int64,
        true,
    )));
    for id in values {
        builder.append_value([Some(id), Some(id + 1)]);
    }
    Arc::new(builder.finish())
}

/// Every batch of the source, one per block, each checked to have the source's schema.
fn batches(source: &ParquetSource) -> Vec<RecordBatch> {
    (0..source.num_blocks() as u32)
        .map(|block| {
            let batch = source.read_record_batch(block).unwrap();
            assert_eq!(batch.schema(), source.schema(), "block {block}");
            batch
        })
        .collect()
}

#[test]
fn columns_in_another_order_are_matched_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_ids(&dir.path().join("a.parquet"), 0..5, 10);
    let swapped = batch(vec![
        (
            "x",
            Arc::new(Float32Array::from_iter_values(
                (5..9).map(|id| id as f32 / 2.0),
            )),
        ),
        ("id", ids(5..9)),
    ]);
    write_batch(&dir.path().join("b.parquet"), &swapped, 10);

    let source = ParquetSource::builder()
        .dir(dir.path())
        .build_with(pair_decoder())
        .unwrap();
    let pairs: Vec<(i64, f32)> = (0..source.num_blocks() as u32)
        .flat_map(|block| source.read_block(block).unwrap())
        .collect();
    let expected: Vec<(i64, f32)> = (0..9).map(|id| (id, id as f32 / 2.0)).collect();
    assert_eq!(pairs, expected);

    // Whole row groups come in the first file's order, whatever the file's.
    let arrow = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let last = &batches(&arrow)[1];
    assert_eq!(last.schema().field(0).name(), "id");
    assert_eq!(
        last.column(0).as_primitive::<Int64Type>().values(),
        &[5, 6, 7, 8]
    );
    // A projection gives the columns in the order it names them, in every file.
    let projected = ParquetSource::builder()
        .dir(dir.path())
        .columns(["x", "id"])
        .build()
        .unwrap();
    for batch in batches(&projected) {
        assert_eq!(batch.schema().field(0).name(), "x");
        let x = batch
            .column(0)
            .as_primitive::<kiln_ml_data::arrow_array::types::Float32Type>();
        let id = batch.column(1).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            assert_eq!(x.value(row), id.value(row) as f32 / 2.0);
        }
    }
}

#[test]
fn legacy_and_compliant_list_child_names_are_one_column() {
    let dir = tempfile::tempdir().unwrap();
    // Arrow and legacy writers name the child `item`; compliant writers `element`.
    let legacy = batch(vec![("id", ids(0..3)), ("pair", pairs_list(0..3, "item"))]);
    let compliant = batch(vec![
        ("id", ids(3..5)),
        ("pair", pairs_list(3..5, "element")),
    ]);
    write_batch(&dir.path().join("a.parquet"), &legacy, 10);
    write_batch(&dir.path().join("b.parquet"), &compliant, 10);

    // Each file keeps its writer's name on its own.
    let child_of = |name: &str| {
        let alone = ParquetSource::builder()
            .file(dir.path().join(name))
            .build()
            .unwrap();
        match alone.schema().field(1).data_type() {
            DataType::List(child) => child.name().clone(),
            other => panic!("{other}"),
        }
    };
    assert_eq!(
        (child_of("a.parquet"), child_of("b.parquet")),
        ("item".into(), "element".into())
    );

    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    let mut seen = Vec::new();
    for batch in batches(&source) {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let lists = column::<ListArray>(&batch, "pair").unwrap();
        for row in 0..batch.num_rows() {
            let list = lists.value(row);
            let values = list.as_primitive::<Int64Type>().values().to_vec();
            seen.push((ids.value(row), values));
        }
    }
    let expected: Vec<(i64, Vec<i64>)> = (0..5).map(|id| (id, vec![id, id + 1])).collect();
    assert_eq!(seen, expected);
}

#[test]
fn dictionary_and_plain_columns_of_the_same_values_are_one_column() {
    let dir = tempfile::tempdir().unwrap();
    let labels = ["cat", "dog", "cat"];
    let encoded: DictionaryArray<Int32Type> = labels.into_iter().collect();
    write_batch(
        &dir.path().join("a.parquet"),
        &batch(vec![("id", ids(0..3)), ("label", Arc::new(encoded))]),
        10,
    );
    write_batch(
        &dir.path().join("b.parquet"),
        &batch(vec![
            ("id", ids(3..5)),
            ("label", Arc::new(StringArray::from(vec!["emu", "cat"]))),
        ]),
        10,
    );

    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    // Mixed encodings read as the plain values in every file, so one decoder fits all.
    assert_eq!(
        source
            .schema()
            .field_with_name("label")
            .unwrap()
            .data_type(),
        &DataType::Utf8
    );
    let read: Vec<String> = batches(&source)
        .iter()
        .flat_map(|batch| {
            let labels = column::<StringArray>(batch, "label").unwrap();
            labels
                .iter()
                .map(|label| label.unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(read, ["cat", "dog", "cat", "emu", "cat"]);

    // A dictionary in every file stays one.
    let only_encoded = ParquetSource::builder()
        .file(dir.path().join("a.parquet"))
        .build()
        .unwrap();
    assert!(matches!(
        only_encoded.schema().field(1).data_type(),
        DataType::Dictionary(..)
    ));
}

#[test]
fn nullability_is_the_union_and_nulls_name_their_row() {
    let dir = tempfile::tempdir().unwrap();
    // `write_ids` writes `id` as required (non-nullable).
    write_ids(&dir.path().join("a.parquet"), 0..3, 10);
    let with_null = batch(vec![
        (
            "id",
            Arc::new(Int64Array::from(vec![Some(3), Some(4), None])),
        ),
        ("x", Arc::new(Float32Array::from(vec![1.5, 2.0, 2.5]))),
    ]);
    write_batch(&dir.path().join("b.parquet"), &with_null, 10);

    let source = ParquetSource::builder().dir(dir.path()).build().unwrap();
    assert!(source.schema().field_with_name("id").unwrap().is_nullable());
    let nulls: Vec<usize> = batches(&source)
        .iter()
        .map(|batch| batch.column(0).null_count())
        .collect();
    assert_eq!(nulls, [0, 1]);

    // A decoder that needs values refuses the null, naming file, row group, column and row.
    let ids = source.with_decoder(id_decoder());
    assert_eq!(ids.read_block(0).unwrap(), [0, 1, 2]);
    let error = ids.read_block(1).unwrap_err();
    let place = "b.parquet, row group 0, column \"id\", row 2: ";
    assert!(matches!(error, Error::Decode { .. }), "{error}");
    assert!(error.to_string().contains(place), "{error}");
}

/// Builds a source from `a.parquet` then `b.parquet` holding these batches; returns the error.
fn refusal(dir: &Path, a: &RecordBatch, b: &RecordBatch) -> String {
    write_batch(&dir.join("a.parquet"), a, 10);
    write_batch(&dir.join("b.parquet"), b, 10);
    schema_refusal(dir, &dir.join("a.parquet"), &dir.join("b.parquet"))
}

#[test]
fn real_differences_are_refused_naming_both_files_the_column_and_the_types() {
    let cases: Vec<(RecordBatch, RecordBatch, &str)> = vec![
        (
            batch(vec![("id", ids(0..2))]),
            batch(vec![("id", Arc::new(Float64Array::from(vec![0.0, 1.0])))]),
            "column \"id\" is Float64 here but Int64 in the reference",
        ),
        (
            batch(vec![("pair", pairs_list(0..2, "item"))]),
            batch(vec![(
                "pair",
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                    Some(vec![Some(1)]),
                ])),
            )]),
            "(the list values are Int32 here but Int64 in the reference)",
        ),
        (
            batch(vec![("id", ids(0..2))]),
            batch(vec![(
                "id",
                Arc::new(
                    vec!["a", "b"]
                        .into_iter()
                        .collect::<DictionaryArray<Int32Type>>(),
                ),
            )]),
            "column \"id\" is Dictionary(Int32, Utf8) here but Int64 in the reference",
        ),
        (
            batch(vec![("id", ids(0..2)), ("y", ids(0..2))]),
            batch(vec![("id", ids(0..2))]),
            "column \"y\" is missing here",
        ),
        (
            batch(vec![("id", ids(0..2))]),
            batch(vec![("id", ids(0..2)), ("z", ids(0..2))]),
            "column \"z\" is here but not in the reference",
        ),
    ];
    for (a, b, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let message = refusal(dir.path(), &a, &b);
        assert!(
            message.contains(expected),
            "{message}\nexpected: {expected}"
        );
    }
}

#[test]
fn a_column_name_used_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let twice = RecordBatch::try_new(
        Arc::new(kiln_ml_data::arrow_schema::Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("id", DataType::Int64, false),
        ])),
        vec![ids(0..2), ids(10..12)],
    )
    .unwrap();
    write_batch(&dir.path().join("a.parquet"), &twice, 10);
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    assert!(
        matches!(error, Error::DuplicateColumn { count: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("a.parquet"), "{error}");
    // Asked for by name, too: the projection alone would hold one `id`, the file's first.
    let error = ParquetSource::builder()
        .dir(dir.path())
        .columns(["id"])
        .build()
        .unwrap_err();
    assert!(
        matches!(error, Error::DuplicateColumn { count: 2, .. }),
        "{error}"
    );
}
