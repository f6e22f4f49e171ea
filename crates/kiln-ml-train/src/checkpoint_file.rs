//! The checkpoint file: named sections in one file, checksummed, written atomically.
//!
//! Layout (little-endian): the magic `KILNCKPT`, a `u32` format version, a `u32` section count,
//! then per section a `u16` name length, the name, a `u64` byte length and the bytes; last, the
//! 16-byte XXH3-128 [`Fingerprint`] of everything before it. One file per checkpoint keeps the
//! write atomic: it is written to a temporary file in the same directory, synced, and renamed
//! over the target, so a crash leaves either the old checkpoint or the new one.

use std::path::{Path, PathBuf};

use kiln_ml_core::Fingerprint;

use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"KILNCKPT";
const FORMAT_VERSION: u32 = 1;
const CHECKSUM_BYTES: usize = 16;

/// Writes `sections` to `path` atomically (temporary file + rename).
pub(crate) fn write_sections(path: &Path, sections: &[(&str, &[u8])]) -> Result<()> {
    let mut body = Vec::with_capacity(sections.iter().map(|(_, b)| b.len() + 32).sum());
    body.extend_from_slice(MAGIC);
    body.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    body.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    for (name, bytes) in sections {
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        body.extend_from_slice(bytes);
    }
    let checksum = Fingerprint::of_bytes(&body).to_le_bytes();
    body.extend_from_slice(&checksum);

    if let Some(directory) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        // A new checkpoint directory is synced into its parent too: the file's own sync
        // does not make the directory leading to it durable.
        kiln_ml_core::create_dir_all_synced(directory).map_err(|error| Error::CheckpointIo {
            path: error.path,
            action: error.action,
            source: error.source,
        })?;
    }
    let durable = kiln_ml_core::Durability::Synced;
    kiln_ml_core::write_atomic(path, &body, durable).map_err(|error| Error::CheckpointIo {
        path: error.path,
        action: error.action,
        source: error.source,
    })?;
    Ok(())
}

/// A checkpoint file's sections, by name, and its checksum (which tells files apart).
#[derive(Debug)]
pub(crate) struct Sections {
    pub(crate) sections: Vec<(String, Vec<u8>)>,
    pub(crate) checksum: Fingerprint,
}

/// Reads the sections of a checkpoint file, checking magic, version and checksum.
pub(crate) fn read_sections(path: &Path) -> Result<Sections> {
    let bytes = std::fs::read(path).map_err(|source| Error::CheckpointIo {
        path: path.to_path_buf(),
        action: "read",
        source,
    })?;
    parse(&bytes).map_err(|reason| Error::CheckpointFormat {
        path: path.to_path_buf(),
        reason,
    })
}

fn parse(bytes: &[u8]) -> std::result::Result<Sections, String> {
    if bytes.len() < MAGIC.len() + 8 + CHECKSUM_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a kiln checkpoint (no KILNCKPT header)".to_owned());
    }
    let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let mut expected = [0u8; CHECKSUM_BYTES];
    expected.copy_from_slice(checksum);
    let checksum = Fingerprint::from_le_bytes(expected);
    if Fingerprint::of_bytes(body) != checksum {
        return Err(format!(
            "checksum mismatch over {} bytes: the file is truncated or corrupted",
            body.len()
        ));
    }
    let mut reader = Reader {
        bytes: body,
        offset: MAGIC.len(),
    };
    let version = reader.u32("format version")?;
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this kiln-ml-train reads version {FORMAT_VERSION}"
        ));
    }
    let count = reader.u32("section count")?;
    let mut sections = Vec::with_capacity(count.min(64) as usize);
    for index in 0..count {
        let name_len = reader.u16(&format!("name length of section {index}"))?;
        let name = reader.take(name_len as u64, &format!("name of section {index}"))?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| format!("section {index} has a name that is not UTF-8"))?;
        let len = reader.u64(&format!("length of section {name:?}"))?;
        let data = reader.take(len, &format!("bytes of section {name:?}"))?;
        sections.push((name, data.to_vec()));
    }
    if reader.offset != body.len() {
        return Err(format!(
            "{} unexpected bytes after the last section",
            body.len() - reader.offset
        ));
    }
    Ok(Sections { sections, checksum })
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: u64, what: &str) -> std::result::Result<&'a [u8], String> {
        let available = (self.bytes.len() - self.offset) as u64;
        if len > available {
            return Err(format!(
                "{what} at byte {} needs {len} bytes, only {available} remain",
                self.offset
            ));
        }
        let start = self.offset;
        self.offset += len as usize;
        Ok(&self.bytes[start..self.offset])
    }

    fn u16(&mut self, what: &str) -> std::result::Result<u16, String> {
        let mut raw = [0u8; 2];
        raw.copy_from_slice(self.take(2, what)?);
        Ok(u16::from_le_bytes(raw))
    }

    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_le_bytes(raw))
    }

    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(raw))
    }
}

/// The file name of the checkpoint after optimizer step `step`.
pub(crate) fn file_name(step: u64) -> String {
    format!("step-{step:012}.kiln")
}

/// The optimizer step of a checkpoint file name written by this crate: exactly the name
/// [`file_name`] gives (a hand-saved `step-5.kiln` is not one, so rotation leaves it alone).
fn step_of(name: &str) -> Option<u64> {
    let step = name
        .strip_prefix("step-")?
        .strip_suffix(".kiln")?
        .parse()
        .ok()?;
    (file_name(step) == name).then_some(step)
}

/// Whether `name` is the temporary file of a checkpoint write ([`write_atomic`]'s
/// `.NAME.XXXXXX.tmp`, NAME a name [`file_name`] gives) that never reached its rename.
///
/// [`write_atomic`]: kiln_ml_core::write_atomic
fn is_checkpoint_temporary(name: &str) -> bool {
    let Some(inner) = name
        .strip_prefix('.')
        .and_then(|rest| rest.strip_suffix(".tmp"))
    else {
        return false;
    };
    inner.rsplit_once('.').is_some_and(|(target, random)| {
        !random.is_empty()
            && random.chars().all(|c| c.is_ascii_alphanumeric())
            && step_of(target).is_some()
    })
}

/// The checkpoint files in `directory`, oldest first.
pub fn list_checkpoints(directory: &Path) -> Result<Vec<PathBuf>> {
    Ok(checkpoints_by_step(directory)?
        .into_iter()
        .map(|(_, path)| path)
        .collect())
}

/// The checkpoint files in `directory` with their steps, oldest first.
fn checkpoints_by_step(directory: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::CheckpointIo {
                path: directory.to_path_buf(),
                action: "list",
                source,
            });
        }
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name();
            step_of(name.to_str()?).map(|step| (step, entry.path()))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The newest checkpoint in `directory`, if any: pass it to
/// [`Trainer::load_checkpoint`](crate::Trainer::load_checkpoint) to resume.
pub fn latest_checkpoint(directory: &Path) -> Result<Option<PathBuf>> {
    Ok(list_checkpoints(directory)?.pop())
}

/// `path` with `suffix` added, then `.1`, `.2`... until the name is free: an earlier rollback's
/// abandoned checkpoint of the same step is kept, not overwritten.
fn free_name(path: &Path, suffix: &str) -> PathBuf {
    let mut base = path.as_os_str().to_owned();
    base.push(suffix);
    let mut candidate = PathBuf::from(&base);
    let mut serial = 0u32;
    while candidate.exists() {
        serial += 1;
        let mut next = base.clone();
        next.push(format!(".{serial}"));
        candidate = PathBuf::from(next);
    }
    candidate
}

/// After the checkpoint of step `written` was written into `directory`: deletes all but the
/// newest `keep` checkpoints up to that step, sets aside those of later steps, and deletes the
/// temporary files of checkpoint writes a killed run left behind (each as large as a
/// checkpoint; see [`remove_stale_temporaries`]).
///
/// A checkpoint of a later step belongs to a trajectory this run abandoned (it resumed from an
/// earlier checkpoint, say to roll back a divergence). Counted as newest, it would make the
/// pruning delete the checkpoint just written, and `latest_checkpoint` would resume the
/// abandoned run at the next restart. It is renamed `….kiln.abandoned` (kept, and no longer
/// listed), with a warning. Returns the files set aside.
pub(crate) fn prune(directory: &Path, keep: usize, written: u64) -> Result<Vec<PathBuf>> {
    let (ours, later): (Vec<_>, Vec<_>) = checkpoints_by_step(directory)?
        .into_iter()
        .partition(|(step, _)| *step <= written);
    let set_aside = set_aside(later, written)?;
    remove_stale_temporaries(directory);
    let excess = ours.len().saturating_sub(keep);
    for (_, path) in &ours[..excess] {
        std::fs::remove_file(path).map_err(|source| Error::CheckpointIo {
            path: path.clone(),
            action: "remove old checkpoint",
            source,
        })?;
    }
    Ok(set_aside)
}

/// How long a checkpoint write's temporary file must have been left unmodified before it is
/// taken for an interrupted write's: another process still writing into the directory (a job
/// requeued while the old one ends) keeps its file's modification time current.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Deletes the temporary files of interrupted checkpoint writes in `directory` (unmodified for
/// [`STALE_TEMPORARY`]). A failure is a warning: the checkpoint itself is written by then.
fn remove_stale_temporaries(directory: &Path) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.filter_map(|entry| entry.ok()) {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(is_checkpoint_temporary)
        {
            continue;
        }
        let idle = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok());
        if idle.is_none_or(|idle| idle < STALE_TEMPORARY) {
            continue;
        }
        let path = entry.path();
        match std::fs::remove_file(&path) {
            Ok(()) => log::info!(
                "removed {}, left by a checkpoint write that did not finish",
                path.display()
            ),
            // Another cleaner was first.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => log::warn!(
                "could not remove {}, left by a checkpoint write that did not finish: {error}",
                path.display()
            ),
        }
    }
}

/// Sets aside the checkpoints in `directory` of steps after `loaded`, the step a run resumed
/// from, when that run starts: one of its files of the same step as an abandoned one would
/// otherwise replace it, and a crash before its first write would resume from the abandoned
/// newest.
pub(crate) fn set_aside_after(directory: &Path, loaded: u64) -> Result<Vec<PathBuf>> {
    let later = checkpoints_by_step(directory)?
        .into_iter()
        .filter(|(step, _)| *step > loaded)
        .collect();
    set_aside(later, loaded)
}

/// Renames each of `later` (checkpoints of steps after `step`) `….kiln.abandoned`, with a
/// warning.
fn set_aside(later: Vec<(u64, PathBuf)>, step: u64) -> Result<Vec<PathBuf>> {
    let mut set_aside = Vec::with_capacity(later.len());
    for (_, path) in later {
        let abandoned = free_name(&path, ".abandoned");
        std::fs::rename(&path, &abandoned).map_err(|source| Error::CheckpointIo {
            path: path.clone(),
            action: "set aside a later step's checkpoint",
            source,
        })?;
        log::warn!(
            "{} is from a later step than this run's checkpoint of step {step} (a trajectory it \
             abandoned by resuming from an earlier one): renamed {}",
            path.display(),
            abandoned.display()
        );
        set_aside.push(abandoned);
    }
    Ok(set_aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.kiln");
        write_sections(
            &path,
            &[("state", b"{}"), ("model", &[1, 2, 3]), ("empty", &[])],
        )
        .unwrap();
        let sections = read_sections(&path).unwrap().sections;
        assert_eq!(sections[1], ("model".to_owned(), vec![1, 2, 3]));
        assert_eq!(sections[2].1.len(), 0);
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn damage_is_reported_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.kiln");
        write_sections(&path, &[("state", b"0123456789")]).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let error = read_sections(&path).unwrap_err().to_string();
        assert!(
            error.contains("checksum") && error.contains("b.kiln"),
            "{error}"
        );

        std::fs::write(&path, b"hello").unwrap();
        let error = read_sections(&path).unwrap_err().to_string();
        assert!(error.contains("not a kiln checkpoint"), "{error}");
    }

    #[test]
    fn truncated_sections_are_named() {
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&5u16.to_le_bytes());
        body.extend_from_slice(b"model");
        body.extend_from_slice(&100u64.to_le_bytes());
        let checksum = Fingerprint::of_bytes(&body).to_le_bytes();
        body.extend_from_slice(&checksum);
        let error = parse(&body).unwrap_err();
        assert!(error.contains("bytes of section \"model\""), "{error}");
    }

    #[test]
    fn listing_orders_by_step_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        for step in [10, 2, 30] {
            write_sections(&dir.path().join(file_name(step)), &[("s", b"x")]).unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let latest = latest_checkpoint(dir.path()).unwrap().unwrap();
        assert!(latest.ends_with(file_name(30)));
        assert!(prune(dir.path(), 2, 30).unwrap().is_empty());
        let left = list_checkpoints(dir.path()).unwrap();
        assert_eq!(left.len(), 2);
        assert!(left[0].ends_with(file_name(10)));
        assert_eq!(
            latest_checkpoint(&dir.path().join("missing")).unwrap(),
            None
        );
    }

    #[test]
    fn checkpoints_of_an_abandoned_later_trajectory_are_set_aside_not_counted() {
        let dir = tempfile::tempdir().unwrap();
        // A run wrote steps 100, 200 and 300, was resumed from 100, and has just written 110.
        for step in [100, 200, 300, 110] {
            write_sections(&dir.path().join(file_name(step)), &[("s", b"x")]).unwrap();
        }
        let set_aside = prune(dir.path(), 1, 110).unwrap();
        assert_eq!(set_aside.len(), 2);
        assert!(set_aside[0].ends_with(format!("{}.abandoned", file_name(200))));
        assert!(
            set_aside.iter().all(|path| path.exists()),
            "nothing deleted"
        );
        let left = list_checkpoints(dir.path()).unwrap();
        assert_eq!(left.len(), 1);
        assert!(left[0].ends_with(file_name(110)), "{left:?}");
        assert!(
            latest_checkpoint(dir.path())
                .unwrap()
                .unwrap()
                .ends_with(file_name(110))
        );
        // A second rollback past step 200 keeps the first one's abandoned file too.
        write_sections(&dir.path().join(file_name(200)), &[("s", b"y")]).unwrap();
        let again = prune(dir.path(), 1, 110).unwrap();
        assert!(again[0].ends_with(format!("{}.abandoned.1", file_name(200))));
        assert!(
            dir.path()
                .join(format!("{}.abandoned", file_name(200)))
                .exists()
        );
    }

    #[test]
    fn pruning_removes_interrupted_writes_of_checkpoints_only() {
        let dir = tempfile::tempdir().unwrap();
        write_sections(&dir.path().join(file_name(10)), &[("s", b"x")]).unwrap();
        let interrupted = format!(".{}.a1B2c3.tmp", file_name(5));
        // Not a checkpoint's temporary file: another name, or no random part.
        let kept = [
            ".notes.txt.a1B2c3.tmp".to_owned(),
            format!(".{}.tmp", file_name(5)),
            format!("{}.a1B2c3.tmp", file_name(5)),
        ];
        // A write still going on (recently modified) is left alone.
        let live = format!(".{}.z9Y8x7.tmp", file_name(10));
        let long_ago = std::time::SystemTime::now() - 2 * STALE_TEMPORARY;
        for name in kept.iter().chain([&interrupted, &live]) {
            let path = dir.path().join(name);
            std::fs::write(&path, b"partial").unwrap();
            if *name != live {
                let file = std::fs::File::options().write(true).open(&path).unwrap();
                file.set_modified(long_ago).unwrap();
            }
        }
        assert!(is_checkpoint_temporary(&interrupted));
        prune(dir.path(), 2, 10).unwrap();
        assert!(!dir.path().join(&interrupted).exists());
        assert!(dir.path().join(&live).exists());
        for name in &kept {
            assert!(dir.path().join(name).exists(), "{name}");
        }
        assert_eq!(list_checkpoints(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn only_names_this_crate_writes_are_checkpoints() {
        assert_eq!(step_of(&file_name(5)), Some(5));
        for foreign in [
            "step-5.kiln",
            "step-+00000000005.kiln",
            "step-00000000005.kiln",
        ] {
            assert_eq!(step_of(foreign), None, "{foreign}");
        }
        let dir = tempfile::tempdir().unwrap();
        write_sections(&dir.path().join(file_name(9)), &[("s", b"x")]).unwrap();
        std::fs::write(dir.path().join("step-5.kiln"), b"mine").unwrap();
        std::fs::write(dir.path().join("step-50.kiln"), b"mine").unwrap();
        prune(dir.path(), 0, 9).unwrap();
        assert!(dir.path().join("step-5.kiln").exists());
        assert!(
            dir.path().join("step-50.kiln").exists(),
            "not set aside as a later step"
        );
    }
}
