//! Hive partition directories (`split=train/part-0.parquet`): the values a file's path gives
//! its partition columns.

use std::path::{Component, Path};
use std::sync::Arc;

use arrow_array::{ArrayRef, StringArray};

use crate::{Error, Result};

/// The directory name Hive, Spark and pyarrow write for a null partition value.
const NULL_VALUE: &str = "__HIVE_DEFAULT_PARTITION__";

/// The partition values of one file, in path order: one `(key, value)` per `key=value`
/// directory between the input's base directory and the file (`None` for a null value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Partitions(Vec<(String, Option<String>)>);

impl Partitions {
    /// The partitions of `file`, found in the directories between `base` and it. Directories
    /// that are not `key=value` are passed over, as pyarrow and Spark do; keys and values are
    /// percent-decoded (`a%3Db` is `a=b`).
    pub(crate) fn of(base: &Path, file: &Path) -> Result<Self> {
        let Some(dirs) = file.parent().and_then(|dir| dir.strip_prefix(base).ok()) else {
            return Ok(Self::default());
        };
        let mut partitions: Vec<(String, Option<String>)> = Vec::new();
        for component in dirs.components() {
            let Component::Normal(name) = component else {
                continue;
            };
            let name = name.to_string_lossy();
            let Some((key, value)) = name.split_once('=') else {
                continue;
            };
            if key.is_empty() {
                continue;
            }
            let key = percent_decode(key);
            if partitions.iter().any(|(seen, _)| *seen == key) {
                return Err(Error::Partition {
                    path: file.to_owned(),
                    reason: format!("the key {key:?} appears twice in its directories"),
                });
            }
            let value = (value != NULL_VALUE).then(|| percent_decode(value));
            partitions.push((key, value));
        }
        Ok(Self(partitions))
    }

    /// The keys, in path order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(key, _)| key.as_str())
    }

    /// The value of `key`: `None` when there is no such key, `Some(None)` for a null value.
    pub(crate) fn value(&self, key: &str) -> Option<Option<&str>> {
        self.0
            .iter()
            .find(|(seen, _)| seen == key)
            .map(|(_, value)| value.as_deref())
    }

    /// The partitions as a path would show them: `split=train/lang=en`.
    pub(crate) fn describe(&self) -> String {
        if self.0.is_empty() {
            return "no partition directories".to_owned();
        }
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(key, value)| format!("{key}={}", value.as_deref().unwrap_or(NULL_VALUE)))
            .collect();
        parts.join("/")
    }
}

/// A column of `rows` copies of one partition value.
pub(crate) fn constant_column(value: Option<&str>, rows: usize) -> ArrayRef {
    Arc::new(StringArray::from_iter(std::iter::repeat_n(value, rows)))
}

/// Decodes `%XX` escapes; text that does not decode to UTF-8 is kept as written.
fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = bytes
            .get(at + 1..at + 3)
            // Exactly two hex digits (`from_str_radix` alone also takes `+1`).
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], escaped) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                at += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_directories_below_the_base_are_partitions() {
        let partitions = Partitions::of(
            Path::new("/data/run=1"),
            Path::new("/data/run=1/split=train/2024/lang=en%2Dus/part-0.parquet"),
        )
        .unwrap();
        assert_eq!(partitions.keys().collect::<Vec<_>>(), ["split", "lang"]);
        assert_eq!(partitions.value("lang"), Some(Some("en-us")));
        assert_eq!(partitions.value("run"), None, "above the base");
        assert_eq!(partitions.describe(), "split=train/lang=en-us");
    }

    #[test]
    fn the_hive_null_is_a_null_and_a_repeated_key_is_refused() {
        let base = Path::new("/d");
        let null = Partitions::of(base, Path::new("/d/k=__HIVE_DEFAULT_PARTITION__/f")).unwrap();
        assert_eq!(null.value("k"), Some(None));
        let error = Partitions::of(base, Path::new("/d/k=1/k=2/f")).unwrap_err();
        assert!(error.to_string().contains("\"k\" appears twice"), "{error}");
    }

    #[test]
    fn bad_escapes_are_kept_as_written() {
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("100%zz"), "100%zz");
        assert_eq!(percent_decode("%ff"), "%ff");
        assert_eq!(percent_decode("a%+1b"), "a%+1b");
        assert_eq!(percent_decode("%+f"), "%+f");
        assert_eq!(percent_decode("a%20b"), "a b");
    }
}
