//! Listing the Parquet objects under a prefix, as a directory is walked.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectMeta;
use object_store::path::Path as ObjectPath;

use super::fetch::{remote_error, with_retries};
use super::store::RemoteStore;
use crate::Result;
use crate::parquet_source::walk::path_order;

/// Every `*.parquet` (or `*.parq`) object under `prefix`, recursively, in a local walk's order
/// (name by name: [`path_order`]). As for a local directory, keys with a part below the prefix
/// that starts with `_` or `.` (`_delta_log/`, `_SUCCESS`, `.staging/`) belong to other tools
/// and are skipped. The whole listing is retried on a transient failure.
pub(crate) fn list_objects(store: &RemoteStore, prefix: &ObjectPath) -> Result<Vec<ObjectMeta>> {
    let object_store = Arc::clone(&store.store);
    let listed = store
        .runtime
        .block_on(with_retries(store.retry, || {
            let object_store = Arc::clone(&object_store);
            let prefix = prefix.clone();
            async move {
                object_store
                    .list(Some(&prefix))
                    .try_collect::<Vec<ObjectMeta>>()
                    .await
            }
        }))
        .map_err(|(attempts, error)| {
            remote_error(&store.url_of(prefix), None, "listing", attempts, &error)
        })?;
    let mut found: Vec<ObjectMeta> = listed
        .into_iter()
        .filter(|meta| is_listed(prefix, &meta.location))
        .collect();
    // The order a local directory of the same files is walked in: one dataset, one plan.
    found.sort_by(|a, b| path_order(a.location.as_ref(), b.location.as_ref()));
    Ok(found)
}

fn is_listed(prefix: &ObjectPath, location: &ObjectPath) -> bool {
    let Some(parts) = location.prefix_match(prefix) else {
        return false;
    };
    let parts: Vec<_> = parts.collect();
    let name = parts.last().map(|part| part.as_ref().to_ascii_lowercase());
    let parquet = name.is_some_and(|name| name.ends_with(".parquet") || name.ends_with(".parq"));
    parquet
        && parts
            .iter()
            .all(|part| !part.as_ref().starts_with('_') && !part.as_ref().starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parquet_keys_and_skips_other_tools_files() {
        let prefix = ObjectPath::from("data/train");
        let listed = |key: &str| is_listed(&prefix, &ObjectPath::from(key));
        assert!(listed("data/train/part-0.parquet"));
        assert!(listed("data/train/split=a/part-1.PARQ"));
        assert!(!listed("data/train/_SUCCESS"));
        assert!(!listed("data/train/_delta_log/0.parquet"));
        assert!(!listed("data/train/.staging/part-2.parquet"));
        assert!(!listed("data/train/notes.txt"));
        assert!(!listed("data/other/part-0.parquet"));
    }
}
