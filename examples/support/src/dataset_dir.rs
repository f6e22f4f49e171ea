//! A generated dataset kept in a folder of the user's (an example's `--dir`): written once,
//! with a record of the settings that made it, and reused only by runs that ask for the same
//! data, so an example never reports flags its data does not have.

use std::path::Path;

use anyhow::{Context, Result, bail};
use kiln_ml::core::{Durability, write_atomic};
use serde::Serialize;
use serde_json::Value;

/// The record's name in the folder. It is written after the data, so its presence also says
/// the data is complete.
pub const RECORD: &str = "dataset.json";

/// What [`reuse_or_write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// The folder held the dataset `spec` describes; nothing was written.
    Reused,
    /// The folder held no dataset; `write` wrote it and the record was added.
    Written,
}

/// Reuses the dataset under `root` when its record equals `spec`, or runs `write` and then
/// records `spec` when `root` holds none. Refused, naming what differs and how to go on:
/// a record of other settings, an unreadable record, or any of `data_dirs` (paths under
/// `root`) holding files without a record (an interrupted write, or data not written here).
pub fn reuse_or_write<S: Serialize>(
    root: &Path,
    spec: &S,
    data_dirs: &[&str],
    write: impl FnOnce() -> Result<()>,
) -> Result<Prepared> {
    if root.exists() && !root.is_dir() {
        bail!("--dir {} is a file; give a folder", root.display());
    }
    let wanted = serde_json::to_value(spec).context("recording the dataset's settings")?;
    let record = root.join(RECORD);
    if record.exists() {
        let text = std::fs::read_to_string(&record)
            .with_context(|| format!("reading {}", record.display()))?;
        let found: Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a dataset record; remove {} or pass another --dir",
                record.display(),
                root.display()
            )
        })?;
        if found != wanted {
            bail!(
                "{} holds a dataset written with other settings ({}): pass the same flags, or \
                 another --dir",
                root.display(),
                differences(&found, &wanted)
            );
        }
        return Ok(Prepared::Reused);
    }
    for dir in data_dirs {
        let dir = root.join(dir);
        let holds_files = std::fs::read_dir(&dir)
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(false);
        if holds_files {
            bail!(
                "{} holds files but {} has no {RECORD}: an interrupted write, data of an \
                 older version of this example, or data it did not write; remove it or pass \
                 another --dir",
                dir.display(),
                root.display()
            );
        }
    }
    write()?;
    let text = serde_json::to_vec_pretty(&wanted)?;
    write_atomic(&record, &text, Durability::Synced)?;
    Ok(Prepared::Written)
}

/// `name: found, asked for wanted` for each top-level field that differs.
fn differences(found: &Value, wanted: &Value) -> String {
    let (Value::Object(found), Value::Object(wanted)) = (found, wanted) else {
        return format!("{found}, asked for {wanted}");
    };
    let mut names: Vec<&String> = found.keys().chain(wanted.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| found.get(*name) != wanted.get(*name))
        .map(|name| {
            let show = |value: Option<&Value>| value.map_or("nothing".to_owned(), Value::to_string);
            format!(
                "{name} {}, asked for {}",
                show(found.get(name)),
                show(wanted.get(name))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Spec {
        files: u32,
        players: u64,
    }

    /// Writes `files` empty files into `root/train`, counting the writes.
    fn writer<'a>(
        root: &'a Path,
        files: u32,
        writes: &'a mut u32,
    ) -> impl FnOnce() -> Result<()> + 'a {
        move || {
            *writes += 1;
            let dir = root.join("train");
            std::fs::create_dir_all(&dir)?;
            for index in 0..files {
                std::fs::write(dir.join(format!("{index}.parquet")), b"")?;
            }
            Ok(())
        }
    }

    /// `reuse_or_write` of `spec` into `root/train`, with [`writer`].
    fn prepare(root: &Path, spec: &Spec, writes: &mut u32) -> Result<Prepared> {
        reuse_or_write(root, spec, &["train"], writer(root, spec.files, writes))
    }

    #[test]
    fn a_dataset_is_written_once_then_reused_only_for_the_same_settings() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let spec = Spec {
            files: 3,
            players: 30,
        };
        let mut writes = 0;
        let prepared = prepare(root, &spec, &mut writes);
        assert_eq!(prepared.unwrap(), Prepared::Written);
        let prepared = prepare(root, &spec, &mut writes);
        assert_eq!(prepared.unwrap(), Prepared::Reused);
        assert_eq!(writes, 1);

        let other = Spec {
            files: 3,
            players: 40,
        };
        let error = prepare(root, &other, &mut writes).unwrap_err().to_string();
        assert!(error.contains("players 30, asked for 40"), "{error}");
        assert!(!error.contains("files"), "{error}");
        assert_eq!(writes, 1);
    }

    #[test]
    fn data_without_a_record_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let spec = Spec {
            files: 2,
            players: 20,
        };
        let mut writes = 0;
        prepare(root, &spec, &mut writes).unwrap();
        // As an interrupted write leaves it: files, and no record.
        std::fs::remove_file(root.join(RECORD)).unwrap();
        let error = prepare(root, &spec, &mut writes).unwrap_err().to_string();
        assert!(error.contains("has no dataset.json"), "{error}");
        assert_eq!(writes, 1);
        // An unreadable record is named too.
        std::fs::write(root.join(RECORD), b"{ not json").unwrap();
        let error = prepare(root, &spec, &mut writes).unwrap_err().to_string();
        assert!(error.contains("is not a dataset record"), "{error}");
    }
}
