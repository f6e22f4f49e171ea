//! Which Parquet compression codecs this build reads, and the feature that adds each.

use parquet::basic::Compression;

/// Why this build cannot decompress column chunks compressed with `codec`, or `None` when it
/// can: the kiln-ml-data feature to turn on, or that no Rust reader supports the codec.
///
/// kiln-ml-data's own features decide, not whichever parquet features another crate happens to
/// turn on, so what is accepted does not depend on the rest of the dependency graph.
pub(crate) fn unreadable_codec(codec: Compression) -> Option<&'static str> {
    let (compiled_in, remedy) = match codec {
        Compression::UNCOMPRESSED => (true, ""),
        Compression::SNAPPY => (
            cfg!(feature = "snappy"),
            "turn on kiln-ml-data's `snappy` feature",
        ),
        Compression::GZIP(_) => (
            cfg!(feature = "gzip"),
            "turn on kiln-ml-data's `gzip` feature",
        ),
        Compression::BROTLI(_) => (
            cfg!(feature = "brotli"),
            "turn on kiln-ml-data's `brotli` feature",
        ),
        Compression::LZ4 | Compression::LZ4_RAW => (
            cfg!(feature = "lz4"),
            "turn on kiln-ml-data's `lz4` feature",
        ),
        Compression::ZSTD(_) => (
            cfg!(feature = "zstd"),
            "turn on kiln-ml-data's `zstd` feature",
        ),
        Compression::LZO => (
            false,
            "the Parquet reader kiln uses has no LZO decoder; rewrite the file with another codec",
        ),
    };
    (!compiled_in).then_some(remedy)
}

/// The codec's name as the Parquet format spells it, without a writer's level.
pub(crate) fn codec_name(codec: Compression) -> &'static str {
    match codec {
        Compression::UNCOMPRESSED => "UNCOMPRESSED",
        Compression::SNAPPY => "SNAPPY",
        Compression::GZIP(_) => "GZIP",
        Compression::LZO => "LZO",
        Compression::BROTLI(_) => "BROTLI",
        Compression::LZ4 => "LZ4",
        Compression::ZSTD(_) => "ZSTD",
        Compression::LZ4_RAW => "LZ4_RAW",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_features_read_every_common_codec_and_never_lzo() {
        for codec in [
            Compression::UNCOMPRESSED,
            Compression::SNAPPY,
            Compression::GZIP(Default::default()),
            Compression::BROTLI(Default::default()),
            Compression::LZ4,
            Compression::LZ4_RAW,
            Compression::ZSTD(Default::default()),
        ] {
            if cfg!(all(
                feature = "snappy",
                feature = "gzip",
                feature = "brotli",
                feature = "lz4",
                feature = "zstd"
            )) {
                assert_eq!(unreadable_codec(codec), None, "{}", codec_name(codec));
            }
        }
        let lzo = unreadable_codec(Compression::LZO).unwrap();
        assert!(lzo.contains("no LZO decoder"), "{lzo}");
    }
}
