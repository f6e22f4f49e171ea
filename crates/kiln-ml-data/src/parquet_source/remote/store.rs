//! An object store opened from a URL, with the runtime its requests run on.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use tokio::runtime::Runtime;
use url::{Position, Url};

use crate::{Error, Result, RetryPolicy};

/// One object store (a bucket, a container, a web server), the runtime its asynchronous
/// requests run on, and the retry policy of every request.
///
/// Loader workers are plain threads: they wait for a request with `Runtime::block_on`, and
/// read-ahead fetches are spawned on the runtime, so many row groups can be in flight while
/// two threads decode.
pub(crate) struct RemoteStore {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) runtime: StoreRuntime,
    pub(crate) retry: RetryPolicy,
    /// `scheme://authority`, for naming objects in errors.
    base: String,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("base", &self.base)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// A store's runtime, shut down in the background when the store goes.
///
/// The last owner of a store may be a read-ahead fetch finishing on one of the runtime's own
/// threads (its source dropped meanwhile); dropping a `Runtime` there panics ("Cannot drop a
/// runtime in a context where blocking is not allowed"). Its requests are only reads, so
/// nothing is lost by not waiting for them.
pub(crate) struct StoreRuntime(Option<Runtime>);

impl std::ops::Deref for StoreRuntime {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        self.0
            .as_ref()
            .expect("the runtime is only taken when the store drops")
    }
}

impl StoreRuntime {
    /// Runs `future` to its end on this store's runtime and returns its output.
    ///
    /// Called from inside another Tokio runtime (a caller's `#[tokio::main]` building a source),
    /// where `Runtime::block_on` panics ("Cannot start a runtime from within a runtime"), it
    /// waits on a scoped thread of its own instead, so a source is built and read the same way
    /// from synchronous and asynchronous code.
    pub(crate) fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let runtime: &Runtime = self;
        if tokio::runtime::Handle::try_current().is_err() {
            return runtime.block_on(future);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(future))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for StoreRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Threads of each store's runtime: they only wait on sockets and copy bytes.
const RUNTIME_THREADS: usize = 2;

impl RemoteStore {
    /// Opens the store a URL names, with credentials and settings from the environment (as
    /// `object_store`'s `from_env` builders read them) and then `options` (`object_store`
    /// configuration keys such as `aws_endpoint` or `aws_allow_http`); returns it with the
    /// URL's path in it.
    pub(crate) fn open(
        url: &Url,
        options: &[(String, String)],
        retry: RetryPolicy,
    ) -> Result<(Arc<Self>, ObjectPath)> {
        let unsupported = |reason: String| Error::UnsupportedUrl {
            url: url.to_string(),
            reason,
        };
        let store = build_store(url, options).map_err(unsupported)?;
        let path = Self::path_of(url)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("kiln-object-store")
            .enable_all()
            .build()
            .map_err(|error| unsupported(format!("cannot start the I/O runtime: {error}")))?;
        let base = url[..Position::BeforePath].to_owned();
        let store = Self {
            store,
            runtime: StoreRuntime(Some(runtime)),
            retry,
            base,
        };
        Ok((Arc::new(store), path))
    }

    /// The path of `url` inside its store.
    pub(crate) fn path_of(url: &Url) -> Result<ObjectPath> {
        ObjectPath::from_url_path(url.path()).map_err(|error| Error::UnsupportedUrl {
            url: url.to_string(),
            reason: format!("its path is not valid: {error}"),
        })
    }

    /// The URL of an object of this store.
    pub(crate) fn url_of(&self, path: &ObjectPath) -> String {
        format!("{}/{path}", self.base)
    }
}

/// `object_store`'s own retries are off: kiln's [`RetryPolicy`] retries each request, so a
/// failing store is given up on after the attempts the user chose, not after both policies'.
#[allow(dead_code, reason = "unused when no store feature is on")]
fn no_client_retries() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 0,
        retry_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// Client settings every store gets before the user's options: a refused connection is known
/// within seconds, and a stalled request does not hang a worker for ever.
const DEFAULT_CLIENT_OPTIONS: [(&str, &str); 2] = [("connect_timeout", "5s"), ("timeout", "60s")];

fn build_store(
    url: &Url,
    options: &[(String, String)],
) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    #[allow(unused_variables, reason = "unused when no store feature is on")]
    let settings = DEFAULT_CLIENT_OPTIONS
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .chain(options.iter().cloned());
    // Every builder takes the same steps; they share no trait to write them once with.
    #[allow(unused_macros, reason = "unused when no store feature is on")]
    macro_rules! open {
        ($builder:expr) => {{
            let mut builder = $builder;
            for (key, value) in settings {
                builder = builder.with_config(parse_key(&key)?, value);
            }
            finish(builder.with_retry(no_client_retries()).build())
        }};
    }
    match url.scheme() {
        #[cfg(feature = "s3")]
        "s3" | "s3a" => {
            open!(object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str()))
        }
        #[cfg(feature = "gcs")]
        "gs" => {
            open!(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str()))
        }
        #[cfg(feature = "azure")]
        "az" | "abfs" | "abfss" | "azure" | "adl" => {
            open!(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str()))
        }
        #[cfg(feature = "http")]
        "http" | "https" => {
            open!(object_store::http::HttpBuilder::new().with_url(&url[..Position::BeforePath]))
        }
        scheme => Err(super::super::scheme::missing_feature(scheme)),
    }
}

#[allow(dead_code, reason = "unused when only some store features are on")]
fn parse_key<K: std::str::FromStr>(key: &str) -> std::result::Result<K, String>
where
    K::Err: std::fmt::Display,
{
    key.parse()
        .map_err(|error| format!("unknown store option {key:?}: {error}"))
}

#[allow(dead_code, reason = "unused when only some store features are on")]
fn finish<S: ObjectStore>(
    built: object_store::Result<S>,
) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    built
        .map(|store| Arc::new(store) as Arc<dyn ObjectStore>)
        .map_err(|error| format!("cannot open the store: {error}"))
}

#[cfg(test)]
#[cfg(feature = "s3")]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn the_last_owner_may_be_a_task_on_the_runtime_itself() {
        let url = Url::parse("s3://bucket/data/").unwrap();
        let options = [
            ("aws_endpoint", "http://127.0.0.1:9"),
            ("aws_region", "us-east-1"),
        ]
        .map(|(key, value)| (key.to_owned(), value.to_owned()));
        let (store, _) = RemoteStore::open(&url, &options, RetryPolicy::default()).unwrap();
        // A read-ahead fetch holds the store while its source goes: it drops the last owner
        // on one of the runtime's own threads.
        let (go, wait) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel();
        let held = Arc::clone(&store);
        store.runtime.spawn(async move {
            while wait.try_recv() == Err(mpsc::TryRecvError::Empty) {
                tokio::task::yield_now().await;
            }
            let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(held)));
            let _ = done.send(dropped.is_ok());
        });
        drop(store);
        go.send(()).unwrap();
        let dropped_cleanly = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("the task ended");
        assert!(
            dropped_cleanly,
            "dropping the store on its runtime panicked"
        );
    }

    fn store_runtime() -> StoreRuntime {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        StoreRuntime(Some(runtime))
    }

    /// A source built inside a caller's runtime waits as one built outside it does, where
    /// `Runtime::block_on` would panic.
    #[test]
    fn a_request_waits_inside_another_runtime_as_outside_it() {
        let store = store_runtime();
        let request = || async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            7
        };
        assert_eq!(store.block_on(request()), 7);
        let callers = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(callers.block_on(async { store.block_on(request()) }), 7);
    }
}
