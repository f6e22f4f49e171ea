//! Files compressed with each codec writers use: all read by default; one this build cannot
//! read is refused when the source is built, naming the file, the column and the codec.

use kiln_ml_core::{BlockLayout, BlockSource};
use kiln_ml_data::parquet::basic::Compression;
use kiln_ml_data::{Error, ParquetSource};

use crate::common::{ids_batch, pair_decoder};
use crate::rewrite::{edit_column_chunk, write_single_pages};

/// What each common writer default produces: pyarrow, Spark and DuckDB write Snappy, Polars
/// zstd; gzip, Brotli and both LZ4 flavours are a setting away.
#[test]
fn every_common_codec_is_read_by_default() {
    let codecs = [
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::ZSTD(Default::default()),
        Compression::GZIP(Default::default()),
        Compression::BROTLI(Default::default()),
        Compression::LZ4,
        Compression::LZ4_RAW,
    ];
    let dir = tempfile::tempdir().unwrap();
    for (index, codec) in codecs.into_iter().enumerate() {
        let first = index as i64 * 100;
        let path = dir.path().join(format!("part-{index}.parquet"));
        write_single_pages(&path, &ids_batch(first..first + 100), 40, codec);
    }
    let source = ParquetSource::builder()
        .dir(dir.path())
        .build_with(pair_decoder())
        .unwrap();
    let read: Vec<(i64, f32)> = (0..source.num_blocks() as u32)
        .flat_map(|block| source.read_block(block).unwrap())
        .collect();
    let expected: Vec<(i64, f32)> = (0..codecs.len() as i64 * 100)
        .map(|id| (id, id as f32 / 2.0))
        .collect();
    assert_eq!(read, expected);
}

/// LZO is in the format, but no Rust reader decodes it: the file's footer says so, and the
/// source is refused before an epoch starts, not at the chunk's first read.
#[test]
fn a_codec_this_build_cannot_read_is_refused_when_the_source_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lzo.parquet");
    write_single_pages(&path, &ids_batch(0..100), 40, Compression::UNCOMPRESSED);
    edit_column_chunk(&path, 1, 1, |chunk| chunk.set_compression(Compression::LZO));
    let error = ParquetSource::builder()
        .dir(dir.path())
        .build()
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            Error::UnsupportedCodec { path: named, row_group: 1, column, codec: "LZO", .. }
                if named == &path.canonicalize().unwrap() && column == "x"
        ),
        "{message}"
    );
    assert!(
        message.contains("LZO") && message.contains("\"x\""),
        "{message}"
    );

    // Projecting only the columns it can read is fine.
    let source = ParquetSource::builder()
        .file(&path)
        .columns(["id"])
        .build()
        .unwrap();
    assert_eq!(source.read_block(1).unwrap().len(), 40);
}
