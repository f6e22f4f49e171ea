//! Finding the Parquet files of a dataset: explicit files, directories and glob patterns.
//!
//! Directories are walked as Spark, pyarrow.dataset and Arrow walk them: names starting with
//! `_` or `.` (`_delta_log`, `_temporary`, `_SUCCESS`, `.staging`) belong to other tools and
//! are skipped, and links are followed, with a guard against links back to a directory being
//! walked. Globs are matched by the same walker, so the same rules hold for them.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use glob::{MatchOptions, Pattern};

use super::input::{Found, Input};
use super::partition::Partitions;
use super::url_input::{OpenStores, RemoteSettings, UrlInput, url_input};
use super::walk::{Walk, is_skipped_name};
use crate::{Error, Result};

/// The files of all inputs, in input order, without duplicates. Partition values are read from
/// the directories below a directory input or a glob's fixed prefix when `hive` is set.
pub(crate) fn discover(
    inputs: &[Input],
    hive: bool,
    remote: &RemoteSettings,
) -> Result<Vec<Found>> {
    if inputs.is_empty() {
        return Err(Error::NoParquetFiles {
            location: "an empty list of inputs".to_owned(),
        });
    }
    let mut files: Vec<Found> = Vec::new();
    let mut seen: HashMap<PathBuf, usize> = HashMap::new();
    let mut stores = OpenStores::default();
    stores.look_up_ahead(inputs, remote);
    for input in inputs {
        let input = &match input {
            Input::Url(url) => match url_input(url, hive, remote, &mut stores)? {
                UrlInput::Local(local) => local,
                #[cfg(feature = "remote")]
                UrlInput::Remote(found) => {
                    add_remote(&mut files, &mut seen, found, url)?;
                    continue;
                }
            },
            other => other.clone(),
        };
        let (base, found) = match input {
            Input::File(path) => (None, vec![path.clone()]),
            Input::Url(_) => unreachable!("URLs are resolved above"),
            Input::Dir(dir) => (Some(dir.clone()), Walk::new(is_parquet).run(dir)?),
            Input::Glob(pattern) => {
                let glob = GlobInput::parse(pattern)?;
                let found = glob.walk()?;
                (Some(glob.base), found)
            }
        };
        if found.is_empty() {
            return Err(Error::NoParquetFiles {
                location: describe(input),
            });
        }
        for path in found {
            let partitions = match &base {
                Some(base) if hive => Partitions::of(base, &path)?,
                _ => Partitions::default(),
            };
            let canonical = path
                .canonicalize()
                .map_err(|source| Error::io("opening", &path, source))?;
            match seen.get(&canonical) {
                Some(&index) if files[index].partitions != partitions => {
                    return Err(Error::Partition {
                        path: canonical,
                        reason: format!(
                            "the file is reached both under {} and under {} (through links or \
                             overlapping inputs), so its partition values are ambiguous",
                            files[index].partitions.describe(),
                            partitions.describe()
                        ),
                    });
                }
                Some(_) => {}
                None => {
                    seen.insert(canonical.clone(), files.len());
                    files.push(Found {
                        path: canonical,
                        partitions,
                        #[cfg(feature = "remote")]
                        remote: None,
                    });
                }
            }
        }
    }
    Ok(files)
}

/// Adds the objects a URL found, skipping any already found by an earlier input.
#[cfg(feature = "remote")]
fn add_remote(
    files: &mut Vec<Found>,
    seen: &mut HashMap<PathBuf, usize>,
    found: Vec<Found>,
    url: &str,
) -> Result<()> {
    if found.is_empty() {
        return Err(Error::NoParquetFiles {
            location: format!("URL {url}"),
        });
    }
    for found in found {
        if !seen.contains_key(&found.path) {
            seen.insert(found.path.clone(), files.len());
            files.push(found);
        }
    }
    Ok(())
}

fn describe(input: &Input) -> String {
    match input {
        Input::Url(url) => format!("URL {url}"),
        Input::File(path) => format!("file {}", path.display()),
        Input::Dir(path) => format!("directory {}", path.display()),
        Input::Glob(pattern) => format!("glob {pattern:?}"),
    }
}

fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("parquet") || ext.eq_ignore_ascii_case("parq"))
}

/// A glob pattern split into its fixed directory prefix (where the walk starts, and the base of
/// partition directories) and the pattern of the rest.
struct GlobInput {
    base: PathBuf,
    rest: Pattern,
    /// The pattern's own components that start with `_` or `.`: names they match are read.
    spelled_skipped: Vec<Pattern>,
    max_depth: Option<usize>,
}

const MATCH: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

impl GlobInput {
    fn parse(text: &str) -> Result<Self> {
        let invalid = |error: glob::PatternError| Error::InvalidGlob {
            pattern: text.to_owned(),
            reason: error.to_string(),
        };
        Pattern::new(text).map_err(invalid)?;
        let components: Vec<Component> = Path::new(text).components().collect();
        let is_literal = |component: &Component| {
            !component
                .as_os_str()
                .to_string_lossy()
                .contains(['*', '?', '['])
        };
        let fixed = components
            .iter()
            .position(|component| !is_literal(component))
            .unwrap_or(components.len().saturating_sub(1));
        let base: PathBuf = components[..fixed].iter().collect();
        let rest: Vec<String> = components[fixed..]
            .iter()
            .map(|component| component.as_os_str().to_string_lossy().into_owned())
            .collect();
        let spelled_skipped = rest
            .iter()
            .filter(|component| is_skipped_name(component))
            .map(|component| Pattern::new(component).map_err(invalid))
            .collect::<Result<_>>()?;
        Ok(Self {
            base,
            rest: Pattern::new(&rest.join("/")).map_err(invalid)?,
            spelled_skipped,
            max_depth: (!rest.iter().any(|component| component == "**")).then_some(rest.len()),
        })
    }

    fn walk(&self) -> Result<Vec<PathBuf>> {
        if !self.base.as_os_str().is_empty() && !self.base.is_dir() {
            return Ok(Vec::new());
        }
        Walk::new(|path: &Path| {
            path.strip_prefix(&self.base)
                .is_ok_and(|relative| self.rest.matches_path_with(relative, MATCH))
        })
        .keeping(|name: &str| {
            self.spelled_skipped
                .iter()
                .any(|pattern| pattern.matches_with(name, MATCH))
        })
        .max_depth(self.max_depth)
        .run(&self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Local inputs need no store settings.
    fn discover(inputs: &[Input], hive: bool) -> Result<Vec<Found>> {
        super::discover(inputs, hive, &RemoteSettings::default())
    }

    /// A temporary directory holding these (non-Parquet) files.
    fn tree(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"x").unwrap();
        }
        dir
    }

    /// The found files' paths relative to `dir`, as text.
    fn relative_names(files: &[Found], dir: &Path) -> Vec<String> {
        let root = dir.canonicalize().unwrap();
        files
            .iter()
            .map(|found| {
                found
                    .path
                    .strip_prefix(&root)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn directories_are_walked_in_path_order() {
        let dir = tree(&[
            "b.parquet",
            "a.parquet",
            "sub/c.parquet",
            "notes.txt",
            ".hidden.parquet",
        ]);
        let files = discover(&[Input::Dir(dir.path().to_owned())], true).unwrap();
        let names = relative_names(&files, dir.path());
        assert_eq!(names, ["a.parquet", "b.parquet", "sub/c.parquet"]);
    }

    #[test]
    fn an_object_store_listing_sorts_as_a_directory_is_walked() {
        // Names where whole-key order differs: `-` and `.` sort before `/`.
        let keys = [
            "en-US/c.parquet",
            "a.parquet",
            "en/b.parquet",
            "a/x.parquet",
            "en/sub/d.parquet",
        ];
        let dir = tree(&keys);
        let files = discover(&[Input::Dir(dir.path().to_owned())], false).unwrap();
        let walked = relative_names(&files, dir.path());
        assert_eq!(
            walked,
            [
                "a/x.parquet",
                "a.parquet",
                "en/b.parquet",
                "en/sub/d.parquet",
                "en-US/c.parquet"
            ]
        );
        let mut listed = keys.to_vec();
        listed.sort_by(|a, b| super::super::walk::path_order(a, b));
        assert_eq!(listed, walked);
        let mut whole_keys = keys.to_vec();
        whole_keys.sort();
        assert_ne!(whole_keys, walked, "the case this test is about");
    }

    #[test]
    fn globs_skip_other_tools_names_unless_the_pattern_spells_them() {
        let dir = tree(&[
            "a.parquet",
            "_SUCCESS",
            "_tmp/b.parquet",
            "_staging/c.parquet",
            ".x/d.parquet",
            "sub/e.parquet",
        ]);
        let names = |pattern: &str| -> Vec<String> {
            let pattern = format!("{}/{pattern}", dir.path().display());
            relative_names(
                &discover(&[Input::Glob(pattern)], true).unwrap(),
                dir.path(),
            )
        };
        assert_eq!(names("*"), ["a.parquet"]);
        assert_eq!(names("**/*.parquet"), ["a.parquet", "sub/e.parquet"]);
        assert_eq!(names("_staging/*.parquet"), ["_staging/c.parquet"]);
        assert_eq!(
            names("_*/*.parquet"),
            ["_staging/c.parquet", "_tmp/b.parquet"]
        );
        assert_eq!(names(".x/*"), [".x/d.parquet"]);
    }

    #[test]
    fn globs_and_files_combine_without_duplicates() {
        let dir = tree(&["x1.parquet", "x2.parquet", "y.parquet"]);
        let pattern = format!("{}/x*.parquet", dir.path().display());
        let files = discover(
            &[
                Input::File(dir.path().join("y.parquet")),
                Input::Glob(pattern),
                Input::File(dir.path().join("x1.parquet")),
            ],
            true,
        )
        .unwrap();
        assert_eq!(files.len(), 3);
        assert!(files[0].path.ends_with("y.parquet"));
        assert!(files[1].path.ends_with("x1.parquet"));
    }

    #[test]
    fn empty_inputs_name_where_they_looked() {
        let dir = tempfile::tempdir().unwrap();
        let error = discover(&[Input::Dir(dir.path().to_owned())], true).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("no Parquet files found in directory"),
            "{error}"
        );
        let error = discover(&[Input::Glob("[".to_owned())], true).unwrap_err();
        assert!(matches!(error, Error::InvalidGlob { .. }), "{error}");
        let missing = dir.path().join("missing.parquet");
        let error = discover(&[Input::File(missing)], true).unwrap_err();
        assert!(error.to_string().contains("missing.parquet"), "{error}");
    }
}
