//! URL inputs: `file://` URLs as local paths, object-store URLs as listed objects.

#[cfg(feature = "remote")]
use super::input::Found;
use super::input::Input;
#[cfg(not(feature = "remote"))]
use super::scheme::missing_feature;
use crate::{Error, Result, RetryPolicy};

/// The object-store settings of a source: `object_store` options and the retry policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct RemoteSettings {
    pub(crate) options: Vec<(String, String)>,
    pub(crate) retry: RetryPolicy,
}

/// The object stores a source's URLs opened, one per scheme and authority (a bucket, a
/// container, a web server): URLs of one bucket share its client, connection pool and I/O
/// runtime, and their footers are fetched together, many at a time.
#[derive(Default)]
pub(crate) struct OpenStores {
    #[cfg(feature = "remote")]
    by_base: std::collections::HashMap<String, std::sync::Arc<super::remote::RemoteStore>>,
    /// Objects that URL inputs name, looked up ahead of them by URL ([`look_up_ahead`]).
    #[cfg(feature = "remote")]
    looked_up: std::collections::HashMap<String, super::remote::Lookup>,
}

impl OpenStores {
    /// Looks up every object that a URL among `inputs` names (one HEAD request each), many at
    /// a time per store, so that a source of many object URLs does not wait for each lookup in
    /// turn; [`url_input`] then takes the answers. A URL that does not parse or whose store
    /// does not open is left to `url_input` to report.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub(crate) fn look_up_ahead(&mut self, inputs: &[Input], settings: &RemoteSettings) {
        #[cfg(feature = "remote")]
        {
            let mut urls = Vec::new();
            let mut wanted = Vec::new();
            for input in inputs {
                let Input::Url(url) = input else { continue };
                let Ok(parsed) = url::Url::parse(url) else {
                    continue;
                };
                if parsed.scheme() == "file" || !names_an_object(&parsed) {
                    continue;
                }
                if let Ok(opened) = self.open(&parsed, settings) {
                    urls.push(parsed.to_string());
                    wanted.push(opened);
                }
            }
            let found = super::remote::RemoteObject::look_up_all(&wanted);
            self.looked_up.extend(urls.into_iter().zip(found));
        }
    }
}

/// Whether a URL names one object rather than a prefix: its key ends in `.parquet` or `.parq`
/// and it has no trailing slash (which names a prefix even then: Spark and pyarrow write
/// datasets into directories named `events.parquet/`).
#[cfg(feature = "remote")]
fn names_an_object(url: &url::Url) -> bool {
    let key = url.path().to_ascii_lowercase();
    !key.ends_with('/') && (key.ends_with(".parquet") || key.ends_with(".parq"))
}

#[cfg(feature = "remote")]
impl OpenStores {
    /// The store `url` names (opened on first use) and the URL's path in it.
    fn open(
        &mut self,
        url: &url::Url,
        settings: &RemoteSettings,
    ) -> Result<(
        std::sync::Arc<super::remote::RemoteStore>,
        object_store::path::Path,
    )> {
        use super::remote::RemoteStore;

        let base = &url[..url::Position::BeforePath];
        if let Some(store) = self.by_base.get(base) {
            let path = RemoteStore::path_of(url)?;
            return Ok((std::sync::Arc::clone(store), path));
        }
        let (store, path) = RemoteStore::open(url, &settings.options, settings.retry)?;
        self.by_base
            .insert(base.to_owned(), std::sync::Arc::clone(&store));
        Ok((store, path))
    }
}

/// What a URL input resolves to.
pub(crate) enum UrlInput {
    /// A `file://` URL: the local file or directory it names.
    Local(Input),
    /// The objects an object-store URL names (one, or those under a prefix).
    #[cfg(feature = "remote")]
    Remote(Vec<Found>),
}

/// Resolves a URL: `file://` to a local path; `s3://`, `gs://`, `az://`, `http(s)://` to the
/// object it names when its key ends in `.parquet` or `.parq`, else to every Parquet object
/// under it (with Hive partition values from the keys below it when `hive` is set).
pub(crate) fn url_input(
    url: &str,
    hive: bool,
    settings: &RemoteSettings,
    stores: &mut OpenStores,
) -> Result<UrlInput> {
    let parsed = url::Url::parse(url).map_err(|error| Error::UnsupportedUrl {
        url: url.to_owned(),
        reason: format!("not a URL: {error}"),
    })?;
    if parsed.scheme() == "file" {
        let path = parsed.to_file_path().map_err(|()| Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "not a local path".to_owned(),
        })?;
        return Ok(UrlInput::Local(if path.is_dir() {
            Input::Dir(path)
        } else {
            Input::File(path)
        }));
    }
    remote(&parsed, hive, settings, stores)
}

#[cfg(feature = "remote")]
fn remote(
    parsed: &url::Url,
    hive: bool,
    settings: &RemoteSettings,
    stores: &mut OpenStores,
) -> Result<UrlInput> {
    use std::path::PathBuf;

    use super::partition::Partitions;
    use super::remote::{RemoteObject, list_objects};

    let (store, path) = stores.open(parsed, settings)?;
    let mut listed = None;
    if names_an_object(parsed) {
        let looked_up = match stores.looked_up.remove(parsed.as_str()) {
            Some(looked_up) => looked_up,
            None => RemoteObject::head(store.clone(), path.clone()),
        };
        match looked_up {
            Ok(object) => {
                return Ok(UrlInput::Remote(vec![Found {
                    path: PathBuf::from(&object.url),
                    partitions: Partitions::default(),
                    remote: Some(object),
                }]));
            }
            // No such object: such a directory without its slash, when it holds objects;
            // otherwise the lookup's error, which names the URL. A store that refused or did
            // not answer the lookup is not asked again for a listing.
            Err(failed) if failed.missing => match list_objects(&store, &path) {
                Ok(objects) if !objects.is_empty() => listed = Some(objects),
                _ => return Err(failed.error),
            },
            Err(failed) => return Err(failed.error),
        }
    }
    let base = PathBuf::from(store.url_of(&path));
    let objects = match listed {
        Some(objects) => objects,
        None => list_objects(&store, &path)?,
    };
    let mut found = Vec::new();
    for meta in objects {
        let object = RemoteObject::new(store.clone(), &meta);
        let file = PathBuf::from(&object.url);
        let partitions = if hive {
            Partitions::of(&base, &file)?
        } else {
            Partitions::default()
        };
        found.push(Found {
            path: file,
            partitions,
            remote: Some(object),
        });
    }
    Ok(UrlInput::Remote(found))
}

#[cfg(not(feature = "remote"))]
fn remote(parsed: &url::Url, _: bool, _: &RemoteSettings, _: &mut OpenStores) -> Result<UrlInput> {
    Err(Error::UnsupportedUrl {
        url: parsed.to_string(),
        reason: missing_feature(parsed.scheme()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_local_paths() {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let resolved = url_input(
            url.as_str(),
            true,
            &RemoteSettings::default(),
            &mut OpenStores::default(),
        )
        .unwrap();
        assert!(matches!(resolved, UrlInput::Local(Input::Dir(path)) if path == dir.path()));
    }

    #[test]
    fn unknown_schemes_and_bad_urls_are_named() {
        let settings = RemoteSettings::default();
        let error = url_input(
            "ftp://host/data/",
            true,
            &settings,
            &mut OpenStores::default(),
        )
        .err()
        .unwrap();
        assert!(
            error.to_string().contains("unknown scheme \"ftp\""),
            "{error}"
        );
        let error = url_input("not a url", true, &settings, &mut OpenStores::default())
            .err()
            .unwrap();
        assert!(matches!(error, Error::UnsupportedUrl { .. }), "{error}");
    }

    /// URLs of one bucket share one store (client, pool and runtime); another bucket opens its
    /// own. Opening a store contacts nothing.
    #[cfg(feature = "s3")]
    #[test]
    fn urls_of_one_bucket_share_its_store() {
        let settings = RemoteSettings {
            options: [
                ("aws_endpoint", "http://127.0.0.1:9"),
                ("aws_region", "us-east-1"),
            ]
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .to_vec(),
            retry: RetryPolicy::default(),
        };
        let mut stores = OpenStores::default();
        let mut open = |url: &str| {
            let url = url::Url::parse(url).unwrap();
            stores.open(&url, &settings).unwrap()
        };
        let (first, path) = open("s3://bucket/a/part-0.parquet");
        let (second, other_path) = open("s3://bucket/b/");
        let (elsewhere, _) = open("s3://other/a/part-0.parquet");
        assert!(std::sync::Arc::ptr_eq(&first, &second));
        assert!(!std::sync::Arc::ptr_eq(&first, &elsewhere));
        assert_eq!(path.as_ref(), "a/part-0.parquet");
        assert_eq!(other_path.as_ref(), "b");
    }
}
