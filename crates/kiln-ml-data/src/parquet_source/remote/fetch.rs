//! Reading objects: ranged GETs with retries, each answer checked against the object's
//! recorded version.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt};

use super::store::RemoteStore;
use crate::{Error, Result, RetryPolicy};

/// An object as listed (or looked up) when the source was built: where it is, and the size and
/// version every later read must still find.
#[derive(Debug, Clone)]
pub(crate) struct RemoteObject {
    pub(crate) store: Arc<RemoteStore>,
    pub(crate) location: ObjectPath,
    pub(crate) url: String,
    pub(crate) size: u64,
    e_tag: Option<String>,
    /// The modification time, in whole seconds (what an HTTP `Last-Modified` header holds).
    modified_seconds: i64,
    /// The modification time as listed, for messages.
    modified: String,
}

/// The two ends of an object, fetched together when it is opened: its first 4 bytes (the
/// leading magic) and its last [`TAIL_BYTES`] bytes (the footer, almost always).
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    head: Bytes,
    tail_start: u64,
    tail: Bytes,
}

/// Bytes fetched from the end of each object when it is opened: a footer longer than this
/// costs one more request.
const TAIL_BYTES: u64 = 64 << 10;

/// The answer to looking an object up.
pub(crate) type Lookup = std::result::Result<RemoteObject, FailedLookup>;

/// A lookup that failed: the error to report, and whether the store answered that there is no
/// such object (rather than refusing the request or not answering).
#[derive(Debug)]
pub(crate) struct FailedLookup {
    pub(crate) error: Error,
    pub(crate) missing: bool,
}

impl RemoteObject {
    /// The object described by a listing entry or a HEAD answer.
    pub(crate) fn new(store: Arc<RemoteStore>, meta: &ObjectMeta) -> Self {
        Self {
            url: store.url_of(&meta.location),
            location: meta.location.clone(),
            size: meta.size,
            e_tag: meta.e_tag.clone(),
            modified_seconds: meta.last_modified.timestamp(),
            modified: meta.last_modified.to_rfc3339(),
            store,
        }
    }

    /// What identifies this version of the object: its entity tag, else its modification time.
    pub(crate) fn version(&self) -> &str {
        self.e_tag.as_deref().unwrap_or(&self.modified)
    }

    /// Looks an object up (one HEAD request, retried).
    pub(crate) fn head(store: Arc<RemoteStore>, location: ObjectPath) -> Lookup {
        store
            .runtime
            .block_on(Self::look_up(Arc::clone(&store), location))
    }

    /// [`head`](Self::head), as a future on the store's runtime.
    async fn look_up(store: Arc<RemoteStore>, location: ObjectPath) -> Lookup {
        let url = store.url_of(&location);
        let object_store = Arc::clone(&store.store);
        let meta = with_retries(store.retry, || {
            let object_store = Arc::clone(&object_store);
            let location = location.clone();
            async move { object_store.head(&location).await }
        })
        .await
        .map_err(|(attempts, error)| FailedLookup {
            missing: matches!(error, object_store::Error::NotFound { .. }),
            error: remote_error(&url, None, "looking up", attempts, &error),
        })?;
        Ok(Self::new(store, &meta))
    }

    /// Looks up every object of `wanted` (each a store and a path), many at a time on each
    /// store's runtime; the answers are in `wanted`'s order.
    pub(crate) fn look_up_all(wanted: &[(Arc<RemoteStore>, ObjectPath)]) -> Vec<Lookup> {
        let mut found: Vec<Option<Lookup>> = wanted.iter().map(|_| None).collect();
        for (store, mine) in by_store(wanted.iter().map(|(store, _)| store)) {
            let looked_up: Vec<(usize, Lookup)> = store.runtime.block_on(
                futures::stream::iter(mine)
                    .map(|index| {
                        let (store, path) = wanted[index].clone();
                        async move { (index, Self::look_up(store, path).await) }
                    })
                    .buffer_unordered(OPENS_IN_FLIGHT)
                    .collect(),
            );
            for (index, result) in looked_up {
                found[index] = Some(result);
            }
        }
        found
            .into_iter()
            .map(|one| one.expect("every object belongs to one of the stores"))
            .collect()
    }

    /// Fetches the object's two ends (two requests at once, retried).
    pub(crate) async fn fetch_ends(&self) -> Result<Tail> {
        let head_end = self.size.min(4);
        let tail_start = self.size.saturating_sub(TAIL_BYTES);
        let (head, tail) = futures::join!(
            self.fetch(0..head_end, None, "reading the footer of"),
            self.fetch(tail_start..self.size, None, "reading the footer of"),
        );
        Ok(Tail {
            head: head?,
            tail_start,
            tail: tail?,
        })
    }

    /// Reads `range` for opening the file: from the fetched ends when they hold it, else with
    /// one more request.
    pub(crate) fn read_for_footer(&self, ends: &Tail, range: Range<u64>) -> Result<Vec<u8>> {
        if range.end <= ends.head.len() as u64 {
            return Ok(ends.head[range.start as usize..range.end as usize].to_vec());
        }
        if range.start >= ends.tail_start {
            let start = (range.start - ends.tail_start) as usize;
            let end = (range.end - ends.tail_start) as usize;
            if end <= ends.tail.len() {
                return Ok(ends.tail[start..end].to_vec());
            }
        }
        let bytes =
            self.store
                .runtime
                .block_on(self.fetch(range, None, "reading the footer of"))?;
        Ok(bytes.to_vec())
    }

    /// Reads byte ranges of one row group, all at once, each retried; blocks the calling
    /// thread (a loader worker) until they are in.
    pub(crate) fn read_ranges(
        &self,
        ranges: Vec<Range<u64>>,
        row_group: usize,
    ) -> Result<Vec<(u64, Bytes)>> {
        self.store
            .runtime
            .block_on(self.clone().fetch_ranges(ranges, row_group))
    }

    /// Starts reading byte ranges of one row group on the store's runtime, for
    /// [`read_ranges`](Self::read_ranges) to find done later.
    pub(crate) fn spawn_read(
        &self,
        ranges: Vec<Range<u64>>,
        row_group: usize,
    ) -> tokio::task::JoinHandle<Result<Vec<(u64, Bytes)>>> {
        let object = self.clone();
        self.store
            .runtime
            .spawn(async move { object.fetch_ranges(ranges, row_group).await })
    }

    /// Waits for a read started by [`spawn_read`](Self::spawn_read).
    pub(crate) fn join_read(
        &self,
        read: tokio::task::JoinHandle<Result<Vec<(u64, Bytes)>>>,
        row_group: usize,
    ) -> Result<Vec<(u64, Bytes)>> {
        self.store.runtime.block_on(read).unwrap_or_else(|error| {
            Err(remote_error(
                &self.url,
                Some(row_group),
                "reading",
                1,
                &error,
            ))
        })
    }

    async fn fetch_ranges(
        self,
        ranges: Vec<Range<u64>>,
        row_group: usize,
    ) -> Result<Vec<(u64, Bytes)>> {
        let reads = ranges.into_iter().map(|range| {
            let start = range.start;
            let object = &self;
            async move {
                let bytes = object.fetch(range, Some(row_group), "reading").await?;
                Ok::<_, Error>((start, bytes))
            }
        });
        futures::future::try_join_all(reads).await
    }

    /// One ranged GET, retried; the answer must come from the version the source was built
    /// on ([`Error::FileChanged`] otherwise) and hold every byte asked for.
    async fn fetch(
        &self,
        range: Range<u64>,
        row_group: Option<usize>,
        action: &'static str,
    ) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let store = &self.store.store;
        let answer = with_retries(self.store.retry, || async {
            let options = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                ..Default::default()
            };
            let result = store.get_opts(&self.location, options).await?;
            let meta = result.meta.clone();
            let bytes = result.bytes().await?;
            Ok((meta, bytes))
        })
        .await
        .map_err(|(attempts, error)| {
            remote_error(&self.url, row_group, action, attempts, &error)
        })?;
        let (meta, bytes) = answer;
        // Entity tags when both answers carry one (some stores list none), else the
        // modification time to the second.
        let changed = if meta.size != self.size {
            Some(format!(
                "it had {} bytes and now has {}",
                self.size, meta.size
            ))
        } else if let (Some(was), Some(now)) = (&self.e_tag, &meta.e_tag) {
            (!same_entity_tag(was, now))
                .then(|| format!("its entity tag changed from {was} to {now}"))
        } else {
            let now = meta.last_modified.timestamp();
            (now != self.modified_seconds).then(|| {
                format!(
                    "its modification time is {} ({} when the source was built)",
                    meta.last_modified.to_rfc3339(),
                    self.modified
                )
            })
        };
        if let Some(reason) = changed {
            return Err(Error::FileChanged {
                path: self.url.clone().into(),
                reason,
            });
        }
        if bytes.len() as u64 != range.end - range.start {
            return Err(remote_error(
                &self.url,
                row_group,
                action,
                1,
                &format_args!(
                    "asked for bytes {}..{} and got {} bytes",
                    range.start,
                    range.end,
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }
}

/// Whether two entity tags name the same version. Stores quote them unevenly (Azure's listing
/// gives `0x8D…` where its GET answers `"0x8D…"`), and a weak tag (`W/"…"`) names its version
/// too: compared without either.
fn same_entity_tag(a: &str, b: &str) -> bool {
    fn bare(tag: &str) -> &str {
        let tag = tag.trim();
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag.trim_matches('"')
    }
    bare(a) == bare(b)
}

/// Runs a request until it succeeds, fails for good, or has been tried `retry.attempts()`
/// times, waiting the policy's backoff between attempts; returns the attempts made with the
/// last error.
pub(super) async fn with_retries<T, F, Fut>(
    retry: RetryPolicy,
    mut request: F,
) -> std::result::Result<T, (u32, object_store::Error)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let mut attempt = 1;
    loop {
        match request().await {
            Ok(value) => return Ok(value),
            Err(error) if attempt < retry.attempts() && is_transient(&error) => {
                tokio::time::sleep(retry.backoff_before(attempt)).await;
                attempt += 1;
            }
            Err(error) => return Err((attempt, error)),
        }
    }
}

/// Whether retrying may help: not for a missing object, a denied request, a path or request
/// the store refuses, or a precondition.
fn is_transient(error: &object_store::Error) -> bool {
    use object_store::Error as E;
    !matches!(
        error,
        E::NotFound { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::AlreadyExists { .. }
            | E::Precondition { .. }
            | E::NotModified { .. }
            | E::NotImplemented { .. }
            | E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::UnknownConfigurationKey { .. }
    )
}

pub(super) fn remote_error(
    url: &str,
    row_group: Option<usize>,
    action: &'static str,
    attempts: u32,
    reason: &dyn std::fmt::Display,
) -> Error {
    Error::Remote {
        url: url.to_owned(),
        row_group,
        action,
        attempts,
        reason: reason.to_string(),
    }
}

/// Objects' ends fetched when a source opens them, up to this many at a time per store.
const OPENS_IN_FLIGHT: usize = 32;

/// The distinct stores of `stores` (by identity), each with the indices that name it, in
/// first-seen order.
fn by_store<'a>(
    stores: impl Iterator<Item = &'a Arc<RemoteStore>>,
) -> Vec<(&'a Arc<RemoteStore>, Vec<usize>)> {
    let mut grouped: Vec<(&Arc<RemoteStore>, Vec<usize>)> = Vec::new();
    for (index, store) in stores.enumerate() {
        match grouped
            .iter_mut()
            .find(|(seen, _)| Arc::ptr_eq(seen, store))
        {
            Some((_, indices)) => indices.push(index),
            None => grouped.push((store, vec![index])),
        }
    }
    grouped
}

/// Fetches the ends of every object, many at a time, each on its own store's runtime; the
/// answers are in the objects' order.
pub(crate) fn fetch_all_ends(objects: &[&RemoteObject]) -> Vec<Result<Tail>> {
    let mut ends: Vec<Option<Result<Tail>>> = objects.iter().map(|_| None).collect();
    for (store, mine) in by_store(objects.iter().map(|object| &object.store)) {
        let fetched: Vec<(usize, Result<Tail>)> = store.runtime.block_on(
            futures::stream::iter(mine)
                .map(|index| {
                    let object = objects[index];
                    async move { (index, object.fetch_ends().await) }
                })
                .buffer_unordered(OPENS_IN_FLIGHT)
                .collect(),
        );
        for (index, result) in fetched {
            ends[index] = Some(result);
        }
    }
    ends.into_iter()
        .map(|end| end.expect("every object belongs to one of the stores"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::same_entity_tag;

    #[test]
    fn entity_tags_compare_without_quotes_or_weakness() {
        // Azure lists a blob's tag bare and answers a GET with it quoted.
        assert!(same_entity_tag(
            "0x8D93C7D4629C227",
            "\"0x8D93C7D4629C227\""
        ));
        assert!(same_entity_tag("W/\"abc\"", "\"abc\""));
        assert!(same_entity_tag("\"abc\"", "\"abc\""));
        assert!(!same_entity_tag("\"abc\"", "\"abd\""));
        assert!(!same_entity_tag(
            "0x8D93C7D4629C227",
            "\"0x8D93C7D4629C228\""
        ));
    }
}
