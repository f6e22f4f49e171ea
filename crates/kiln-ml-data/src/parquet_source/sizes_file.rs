//! Sample sizes computed once and kept on disk beside a cache, under the fingerprint of the
//! files they were read from: a list column's lengths cost a decode of the whole column, which
//! later runs then skip.
//!
//! The file: a 16-byte tag, the count (`u64` LE), the sizes (`u64` LE each), then the XXH3-128
//! fingerprint of everything before it. Written atomically; a file that is short, damaged, or
//! for another count is not used (the sizes are read again and the file rewritten).

use std::path::{Path, PathBuf};

use kiln_ml_core::{BlockLayout, Durability, Fingerprint, write_atomic};

use super::sample_sizes::sizes_from;
use super::source::ParquetSourceBuilder;
use crate::{Error, Result};

/// The file's first bytes: what it is, and its format's version.
const TAG: &[u8; 16] = b"kiln-sizes/v1\0\0\0";

impl ParquetSourceBuilder {
    /// [`sample_sizes`](Self::sample_sizes), kept in `dir`: read from the file there when it
    /// was written for the same files (paths, sizes, modification times, row groups) and
    /// column, else read from the column and written there (atomically) for the next run.
    /// Returns the sizes and whether they came from the file.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_ml_data::arrow_array::{Int32Array, RecordBatch};
    /// use kiln_ml_data::parquet::arrow::ArrowWriter;
    /// use kiln_ml_data::ParquetSource;
    ///
    /// let data = tempfile::tempdir()?;
    /// let counts = Int32Array::from(vec![3, 1, 4]);
    /// let batch = RecordBatch::try_from_iter([("n_pulses", Arc::new(counts) as _)])?;
    /// let file = std::fs::File::create(data.path().join("events.parquet"))?;
    /// let mut writer = ArrowWriter::try_new(file, batch.schema(), None)?;
    /// writer.write(&batch)?;
    /// writer.close()?;
    ///
    /// let kept = tempfile::tempdir()?;
    /// let builder = ParquetSource::builder().dir(data.path());
    /// let (sizes, from_file) = builder.clone().sample_sizes_kept("n_pulses", kept.path())?;
    /// assert_eq!((sizes, from_file), (vec![3, 1, 4], false));
    /// let (sizes, from_file) = builder.sample_sizes_kept("n_pulses", kept.path())?;
    /// assert_eq!((sizes, from_file), (vec![3, 1, 4], true));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_sizes_kept(
        self,
        column: &str,
        dir: impl AsRef<Path>,
    ) -> Result<(Vec<u64>, bool)> {
        // Footers only: the layout's fingerprint names the files and their row groups, and the
        // same source reads the sizes when they are not kept.
        let layout = self.columns([column]).build()?;
        let key = Fingerprint::builder()
            .str("kiln sample sizes")
            .u64(1)
            .fingerprint(layout.fingerprint())
            .str(column)
            .finish();
        let path = dir.as_ref().join(format!("sample-sizes-{key}.bin"));
        if let Some(sizes) = read_sizes(&path, layout.num_samples()) {
            return Ok((sizes, true));
        }
        let sizes = sizes_from(layout, column)?;
        std::fs::create_dir_all(dir.as_ref()).map_err(|error| kept_error(dir.as_ref(), &error))?;
        write_atomic(&path, &encode(&sizes), Durability::Synced)
            .map_err(|error| kept_error(&path, &error))?;
        Ok((sizes, false))
    }
}

/// The sizes in `path` when it is a whole, undamaged file of `count` sizes.
fn read_sizes(path: &Path, count: u64) -> Option<Vec<u64>> {
    let bytes = std::fs::read(path).ok()?;
    let body_len = TAG.len() + 8 + usize::try_from(count).ok()?.checked_mul(8)?;
    if bytes.len() != body_len + 16 || !bytes.starts_with(TAG) {
        return None;
    }
    let (body, checksum) = bytes.split_at(body_len);
    if Fingerprint::of_bytes(body).to_le_bytes() != checksum {
        return None;
    }
    let stored = u64::from_le_bytes(body[TAG.len()..TAG.len() + 8].try_into().ok()?);
    (stored == count).then(|| {
        body[TAG.len() + 8..]
            .chunks_exact(8)
            .map(|size| u64::from_le_bytes(size.try_into().expect("8 bytes")))
            .collect()
    })
}

/// The file's bytes for `sizes`.
fn encode(sizes: &[u64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(TAG.len() + 8 + sizes.len() * 8 + 16);
    bytes.extend_from_slice(TAG);
    bytes.extend_from_slice(&(sizes.len() as u64).to_le_bytes());
    for size in sizes {
        bytes.extend_from_slice(&size.to_le_bytes());
    }
    let checksum = Fingerprint::of_bytes(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes
}

/// The error of a sizes file that cannot be written.
fn kept_error(path: &Path, error: &dyn std::fmt::Display) -> Error {
    Error::SizesNotKept {
        path: PathBuf::from(path),
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_short_or_foreign_files_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sizes.bin");
        let sizes = [5u64, 0, 7];
        std::fs::write(&path, encode(&sizes)).unwrap();
        assert_eq!(read_sizes(&path, 3), Some(sizes.to_vec()));
        assert_eq!(read_sizes(&path, 4), None, "another count");
        let mut damaged = encode(&sizes);
        damaged[TAG.len() + 9] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        assert_eq!(read_sizes(&path, 3), None, "a flipped bit");
        let whole = encode(&sizes);
        std::fs::write(&path, &whole[..whole.len() - 1]).unwrap();
        assert_eq!(read_sizes(&path, 3), None, "a short file");
        assert_eq!(read_sizes(&dir.path().join("missing.bin"), 3), None);
    }
}
