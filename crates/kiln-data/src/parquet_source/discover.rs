//! Finding the Parquet files of a dataset: explicit files, directories and glob patterns.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Where to look for Parquet files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// One file, taken as given (whatever its extension).
    File(PathBuf),
    /// Every `*.parquet` file under a directory, recursively, in path order.
    Dir(PathBuf),
    /// Every file matching a glob pattern, in path order.
    Glob(String),
}

/// The files of all inputs, in input order, each canonicalized (so the same file reached by
/// two relative paths has one identity), without duplicates.
pub(crate) fn discover(inputs: &[Input]) -> Result<Vec<PathBuf>> {
    if inputs.is_empty() {
        return Err(Error::NoParquetFiles {
            location: "an empty list of inputs".to_owned(),
        });
    }
    let mut files = Vec::new();
    for input in inputs {
        let found = match input {
            Input::File(path) => vec![path.clone()],
            Input::Dir(dir) => {
                let mut found = Vec::new();
                walk(dir, &mut found)?;
                found.sort();
                found
            }
            Input::Glob(pattern) => glob_files(pattern)?,
        };
        if found.is_empty() {
            return Err(Error::NoParquetFiles {
                location: describe(input),
            });
        }
        for path in found {
            let canonical = path
                .canonicalize()
                .map_err(|source| Error::io("opening", &path, source))?;
            if !files.contains(&canonical) {
                files.push(canonical);
            }
        }
    }
    Ok(files)
}

fn describe(input: &Input) -> String {
    match input {
        Input::File(path) => format!("file {}", path.display()),
        Input::Dir(path) => format!("directory {}", path.display()),
        Input::Glob(pattern) => format!("glob {pattern:?}"),
    }
}

fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("parquet") || ext.eq_ignore_ascii_case("parq"))
}

/// Collects `*.parquet` (and `*.parq`) files under `dir`. Hidden entries are skipped and other
/// extensions ignored, so other tools' temporary and marker files (`_SUCCESS`) are never read.
fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::io("listing", dir, source))?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::io("listing", dir, source))?;
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|source| Error::io("inspecting", &path, source))?;
        if kind.is_dir() {
            walk(&path, found)?;
        } else if is_parquet(&path) {
            found.push(path);
        }
    }
    Ok(())
}

fn glob_files(pattern: &str) -> Result<Vec<PathBuf>> {
    let invalid = |reason: String| Error::InvalidGlob {
        pattern: pattern.to_owned(),
        reason,
    };
    let mut found = Vec::new();
    for entry in glob::glob(pattern).map_err(|error| invalid(error.to_string()))? {
        let path = entry.map_err(|error| invalid(error.to_string()))?;
        if path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    #[test]
    fn directories_are_walked_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "b.parquet",
            "a.parquet",
            "sub/c.parquet",
            "notes.txt",
            ".hidden.parquet",
        ] {
            touch(&dir.path().join(name));
        }
        let files = discover(&[Input::Dir(dir.path().to_owned())]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|path| {
                path.strip_prefix(dir.path().canonicalize().unwrap())
                    .unwrap()
            })
            .map(|path| path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.parquet", "b.parquet", "sub/c.parquet"]);
    }

    #[test]
    fn globs_and_files_combine_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["x1.parquet", "x2.parquet", "y.parquet"] {
            touch(&dir.path().join(name));
        }
        let pattern = format!("{}/x*.parquet", dir.path().display());
        let files = discover(&[
            Input::File(dir.path().join("y.parquet")),
            Input::Glob(pattern),
            Input::File(dir.path().join("x1.parquet")),
        ])
        .unwrap();
        assert_eq!(files.len(), 3);
        assert!(files[0].ends_with("y.parquet"));
        assert!(files[1].ends_with("x1.parquet"));
    }

    #[test]
    fn empty_inputs_name_where_they_looked() {
        let dir = tempfile::tempdir().unwrap();
        let error = discover(&[Input::Dir(dir.path().to_owned())]).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("no Parquet files found in directory"),
            "{error}"
        );
        let error = discover(&[Input::Glob("[".to_owned())]).unwrap_err();
        assert!(matches!(error, Error::InvalidGlob { .. }), "{error}");
        let missing = dir.path().join("missing.parquet");
        let error = discover(&[Input::File(missing)]).unwrap_err();
        assert!(error.to_string().contains("missing.parquet"), "{error}");
    }
}
