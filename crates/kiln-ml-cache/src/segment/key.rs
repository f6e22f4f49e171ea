//! What a segment's content depends on, and the file names that carry it.

use kiln_ml_core::{BlockIndex, Fingerprint};

use super::format::FORMAT_VERSION;

/// Everything a segment's content depends on: the source layout (files, sizes, modification
/// times, projection), the block, the transform and the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentKey {
    /// Fingerprint of the source layout.
    pub layout: Fingerprint,
    /// The block.
    pub block: BlockIndex,
    /// Fingerprint of the transform.
    pub transform: Fingerprint,
    /// Fingerprint of the codec.
    pub codec: Fingerprint,
}

impl SegmentKey {
    /// One fingerprint of the whole key and the format version: the segment's file name.
    pub fn digest(&self) -> Fingerprint {
        // The domain string predates kiln-ml-cache; changing it would orphan every cache on disk.
        Fingerprint::builder()
            .str("kiln-data segment")
            .u64(u64::from(FORMAT_VERSION))
            .fingerprint(self.layout)
            .u64(u64::from(self.block))
            .fingerprint(self.transform)
            .fingerprint(self.codec)
            .finish()
    }

    /// The segment's file name inside the cache directory.
    pub fn file_name(&self) -> String {
        file_name(self.digest())
    }
}

/// The file name of the segment with this digest: `<digest>.v<FORMAT_VERSION>.seg`.
pub(crate) fn file_name(digest: Fingerprint) -> String {
    format!("{digest}.v{FORMAT_VERSION}.seg")
}

/// What a file name in a cache directory says about the file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SegmentName {
    /// A segment of this format version.
    Current(Fingerprint),
    /// A segment of an older format version (version 1 names carry no version).
    OlderVersion,
    /// A segment of a newer format version, written by a newer kiln.
    NewerVersion,
    /// Not a segment's name.
    Foreign,
}

impl SegmentName {
    pub(crate) fn parse(name: &str) -> Self {
        let Some(stem) = name.strip_suffix(".seg") else {
            return Self::Foreign;
        };
        let (digest, version) = match stem.split_once(".v") {
            // Only the canonical spelling (`v2`, not `v02` or `v+2`): an alias would be indexed
            // under a name eviction never deletes.
            Some((digest, version)) => (
                digest,
                version
                    .parse::<u32>()
                    .ok()
                    .filter(|parsed| parsed.to_string() == version),
            ),
            None => (stem, Some(1)),
        };
        match (digest.parse::<Fingerprint>(), version) {
            (Ok(digest), Some(FORMAT_VERSION)) => Self::Current(digest),
            (Ok(_), Some(version)) if version < FORMAT_VERSION => Self::OlderVersion,
            (Ok(_), Some(_)) => Self::NewerVersion,
            _ => Self::Foreign,
        }
    }
}

/// Whether `name` is a temporary file of a segment being written (`.<segment name>.<random>.tmp`,
/// as `write_atomic` names them), of any format version: a user's own `.notes.tmp` is not.
pub(crate) fn is_segment_temporary(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|name| name.strip_suffix(".tmp"))
        .and_then(|name| name.rsplit_once('.'))
        .is_some_and(|(segment, _random)| SegmentName::parse(segment) != SegmentName::Foreign)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::key;

    #[test]
    fn file_names_carry_the_format_version() {
        let digest = key(3).digest();
        let name = key(3).file_name();
        assert_eq!(name, format!("{digest}.v{FORMAT_VERSION}.seg"));
        assert_eq!(SegmentName::parse(&name), SegmentName::Current(digest));
        assert_eq!(
            SegmentName::parse(&format!("{digest}.seg")),
            SegmentName::OlderVersion
        );
        assert_eq!(
            SegmentName::parse(&format!("{digest}.v1.seg")),
            SegmentName::OlderVersion
        );
        assert_eq!(
            SegmentName::parse(&format!("{digest}.v3.seg")),
            SegmentName::NewerVersion
        );
        for foreign in [
            "notes.seg",
            "x.v2.seg",
            &format!("{digest}.v2.tmp"),
            ".seg",
            &format!("{digest}.v02.seg"),
            &format!("{digest}.v+2.seg"),
            &format!("{digest}.v01.seg"),
        ] {
            assert_eq!(
                SegmentName::parse(foreign),
                SegmentName::Foreign,
                "{foreign}"
            );
        }
    }

    #[test]
    fn only_segment_temporaries_are_recognized() {
        let digest = key(3).digest();
        assert!(is_segment_temporary(&format!(
            ".{digest}.v2.seg.Ab12Cd.tmp"
        )));
        assert!(is_segment_temporary(&format!(".{digest}.seg.x.tmp")));
        for other in [
            ".notes.tmp",
            ".a.1.0.tmp",
            &format!("{digest}.v2.seg.x.tmp"),
            ".tmp",
        ] {
            assert!(!is_segment_temporary(other), "{other}");
        }
    }

    #[test]
    fn file_names_are_pinned() {
        // Caches written before kiln-ml-cache split out of kiln-ml-data keep their names: the
        // digest's domain string stays "kiln-data segment".
        assert_eq!(
            key(3).file_name(),
            "70ceaddaf351f6a6f235aa8c3ba99b22.v2.seg"
        );
    }
}
