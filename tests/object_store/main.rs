//! Parquet from an S3-compatible server (moto, started on 127.0.0.1 by the test): the same
//! samples in the same order as from local disk, and a server that stops mid-epoch.
//!
//! Each test starts its own server when one is installed (`KILN_S3_SERVER`, or `moto_server`
//! on the `PATH`) and is skipped otherwise; `KILN_REQUIRE_S3=1` (set by `.ci/run`) makes a
//! missing server a failure.

mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kiln_ml::cache::{Cached, DiskCache};
use kiln_ml::core::{BlockLayout, PlanRequest, Sampler, transform_fn};
use kiln_ml::data::arrow_array::types::Int64Type;
use kiln_ml::data::arrow_array::{Float32Array, Int64Array, RecordBatch};
use kiln_ml::data::parquet::arrow::ArrowWriter;
use kiln_ml::data::parquet::file::properties::WriterProperties;
use kiln_ml::data::{
    Error, Loader, LoaderConfig, ParquetSource, ParquetSourceBuilder, RetryPolicy, collate_fn,
    columnar_fn, decoder_fn, int_vector, required_values,
};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy, SequentialSampler, Sharding};
use server::{RefusingServer, S3Server, start_or_skip, store_options};

const BUCKET: &str = "kiln";
const BATCH: u64 = 25;

/// The dataset's files, in the order a directory walk finds them (and their ids run): name by
/// name, so `en/` comes before `en-US/`, where whole keys sort `-` before `/`.
const FILES: [&str; 6] = [
    "en/part-0.parquet",
    "en-US/part-1.parquet",
    "part-2.parquet",
    "part-3.parquet",
    "part-4.parquet",
    "part-5.parquet",
];

/// Six files of uneven size (ids 0..600 in order), row groups of at most 50 rows; returns the
/// files.
fn write_dataset(dir: &Path) -> Vec<PathBuf> {
    let sizes = [40u32, 150, 60, 200, 90, 60];
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(50))
        .build();
    let mut next = 0i64;
    let mut paths = Vec::new();
    for (index, &rows) in sizes.iter().enumerate() {
        let ids = Int64Array::from_iter_values(next..next + i64::from(rows));
        let x = Float32Array::from_iter_values((0..rows).map(|row| row as f32 * 0.5));
        next += i64::from(rows);
        let batch =
            RecordBatch::try_from_iter([("id", Arc::new(ids) as _), ("x", Arc::new(x) as _)])
                .unwrap();
        let path = dir.join(FILES[index]);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut writer = ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            batch.schema(),
            Some(properties.clone()),
        )
        .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        paths.push(path);
    }
    paths
}

/// Creates the bucket and uploads the files under `data/`, with a marker file that listing
/// must skip.
fn upload(server: &S3Server, paths: &[PathBuf]) {
    server.create_bucket(BUCKET);
    for (path, name) in paths.iter().zip(FILES) {
        server.put(
            BUCKET,
            &format!("data/{name}"),
            &std::fs::read(path).unwrap(),
        );
    }
    server.put(BUCKET, "data/_SUCCESS", b"");
}

fn remote_builder(server: &S3Server, url: &str) -> ParquetSourceBuilder {
    let mut builder = ParquetSource::builder().url(url).retry(
        RetryPolicy::default()
            .with_attempts(3)
            .with_initial_backoff(Duration::from_millis(20)),
    );
    for (key, value) in server.options() {
        builder = builder.store_option(key, value);
    }
    builder
}

fn shuffle() -> kiln_ml::sampler::BlockShuffleSampler {
    BlockShuffleConfig::default()
        .with_batch_size(BATCH)
        .with_remainder(RemainderPolicy::Uneven)
        .init()
        .unwrap()
}

/// Every id an epoch delivers, in order, through columnar batches.
fn epoch_ids(source: ParquetSource, sampler: &dyn Sampler, seed: u64) -> Vec<i64> {
    let collate = columnar_fn(|columns: RecordBatch| int_vector(&columns, "id").unwrap());
    let loader = Loader::new(source, collate, LoaderConfig::new().with_workers(2)).unwrap();
    let epoch = loader
        .plan_epoch(sampler, &PlanRequest::new(seed, 0))
        .unwrap();
    epoch.flat_map(Result::unwrap).collect()
}

#[test]
fn remote_epochs_deliver_what_local_disk_does() {
    let Some(server) = start_or_skip("remote_epochs_deliver_what_local_disk_does") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path());
    upload(&server, &paths);
    let url = format!("s3://{BUCKET}/data/");
    let remote = remote_builder(&server, &url).build().unwrap();
    let local = ParquetSource::builder().dir(dir.path()).build().unwrap();

    // The same files (the marker skipped), in the same order, cut into the same blocks.
    let names: Vec<String> = remote
        .paths()
        .map(|path| path.display().to_string())
        .collect();
    assert_eq!(names.len(), 6);
    assert_eq!(names[0], "s3://kiln/data/en/part-0.parquet");
    assert_eq!(names[1], "s3://kiln/data/en-US/part-1.parquet");
    let rows = |source: &ParquetSource| -> Vec<u64> {
        source.blocks().iter().map(|block| block.rows).collect()
    };
    assert_eq!(rows(&remote), rows(&local));
    assert_eq!(
        remote.read_record_batch(3).unwrap(),
        local.read_record_batch(3).unwrap()
    );
    assert!(remote.bytes_read() > 0);

    let sequential = SequentialSampler::new(Sharding::new(BATCH, RemainderPolicy::Uneven));
    let shuffle = shuffle();
    for seed in [1, 2] {
        let from_remote = epoch_ids(
            remote_builder(&server, &url).build().unwrap(),
            &shuffle,
            seed,
        );
        let from_local = epoch_ids(
            ParquetSource::builder().dir(dir.path()).build().unwrap(),
            &shuffle,
            seed,
        );
        assert_eq!(from_remote.len(), 600);
        assert_eq!(from_remote, from_local, "block shuffle, seed {seed}");
    }
    let from_remote = epoch_ids(remote, &sequential, 0);
    assert_eq!(from_remote, (0..600).collect::<Vec<i64>>());
    drop(local);

    // One object by its URL, and errors that name what was asked for.
    let one = remote_builder(&server, "s3://kiln/data/part-3.parquet")
        .build()
        .unwrap();
    assert_eq!(one.num_samples(), 200);
    // A dataset directory named like a file (as Spark and pyarrow write them), with its
    // trailing slash or without: its objects, not a lookup of one object.
    for (path, name) in paths.iter().zip(FILES).take(2) {
        let part = name.rsplit('/').next().unwrap();
        server.put(
            BUCKET,
            &format!("spark/events.parquet/{part}"),
            &std::fs::read(path).unwrap(),
        );
    }
    for url in [
        "s3://kiln/spark/events.parquet/",
        "s3://kiln/spark/events.parquet",
    ] {
        let directory = remote_builder(&server, url).build().unwrap();
        assert_eq!(directory.num_samples(), 40 + 150, "{url}");
        assert_eq!(directory.paths().count(), 2, "{url}");
    }
    // Many object URLs: looked up together, read in the order given.
    let mut many = remote_builder(&server, "s3://kiln/data/part-4.parquet");
    for name in ["part-2.parquet", "part-3.parquet"] {
        many = many.url(format!("s3://kiln/data/{name}"));
    }
    let many = many.build().unwrap();
    assert_eq!(many.num_samples(), 90 + 60 + 200);
    let order: Vec<String> = many
        .paths()
        .map(|path| path.display().to_string())
        .collect();
    assert!(order[0].ends_with("part-4.parquet"), "{order:?}");
    let missing = "s3://kiln/data/missing.parquet";
    let error = remote_builder(&server, missing).build().unwrap_err();
    assert!(
        matches!(error, Error::Remote { attempts: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains(missing), "{error}");
    let error = remote_builder(&server, "s3://kiln/data/part-2.parquet")
        .url(missing)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains(missing), "{error}");
    let error = remote_builder(&server, "s3://kiln/nothing-here/")
        .build()
        .unwrap_err();
    assert!(matches!(error, Error::NoParquetFiles { .. }), "{error}");
    let error = remote_builder(&server, &url)
        .store_option("aws_no_such_option", "1")
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("aws_no_such_option"), "{error}");
}

/// A store that denies the lookup of an object URL is not asked for a listing as well: the
/// fallback to a dataset directory named like a file (`events.parquet/`) is for an object the
/// store says is missing. Needs no S3 server: the refusing one counts the requests.
#[test]
fn a_denied_lookup_is_reported_without_listing_its_prefix() {
    let server = RefusingServer::start();
    let url = "s3://kiln/data/part-0.parquet";
    let mut builder = ParquetSource::builder().url(url).retry(
        RetryPolicy::default()
            .with_attempts(3)
            .with_initial_backoff(Duration::from_millis(20)),
    );
    for (key, value) in store_options(&server.endpoint()) {
        builder = builder.store_option(key, value);
    }
    let error = builder.build().unwrap_err();
    // Denied is final: one attempt, and the error names the URL.
    assert!(
        matches!(error, Error::Remote { attempts: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains(url), "{error}");
    let requests = server.requests();
    assert_eq!(
        requests,
        ["HEAD /kiln/data/part-0.parquet HTTP/1.1"],
        "{requests:?}"
    );
}

#[test]
fn a_server_that_stops_mid_epoch_fails_by_name_and_the_epoch_resumes() {
    let Some(mut server) = start_or_skip("a_server_that_stops_mid_epoch") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path());
    upload(&server, &paths);
    let url = format!("s3://{BUCKET}/data/");
    let ids = || {
        decoder_fn("ids", 1, |batch: &RecordBatch| {
            Ok(required_values::<Int64Type>(batch, "id")?.to_vec())
        })
    };
    let double = || {
        transform_fn("double", 1, |id: i64| {
            Ok::<_, std::convert::Infallible>(id * 2)
        })
    };
    // Sequential, with little read-ahead: most blocks are still to be fetched when the server
    // stops (a block shuffle of 14 blocks opens them all at once).
    let sampler = SequentialSampler::new(Sharding::new(BATCH, RemainderPolicy::Uneven));
    let request = PlanRequest::new(7, 0);

    // What an uninterrupted epoch delivers, from local disk.
    let local = ParquetSource::builder()
        .dir(dir.path())
        .build_with(ids())
        .unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let local = Cached::new(
        local,
        double(),
        DiskCache::open(cache_dir.path().join("local")).unwrap(),
    );
    let stack = || collate_fn(|ids: Vec<i64>| ids);
    let config = LoaderConfig::new()
        .with_workers(2)
        .with_prefetch_batches(2)
        .with_read_ahead_blocks(1);
    let loader = Loader::new(local, stack(), config).unwrap();
    let expected: Vec<Vec<i64>> = loader
        .plan_epoch(&sampler, &request)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(expected.len(), 24);

    let remote = remote_builder(&server, &url).build_with(ids()).unwrap();
    let cache = DiskCache::open(cache_dir.path().join("remote")).unwrap();
    let loader = Loader::new(Cached::new(remote, double(), cache), stack(), config).unwrap();
    let mut epoch = loader.plan_epoch(&sampler, &request).unwrap();
    let mut delivered = Vec::new();
    for _ in 0..4 {
        delivered.push(epoch.next().unwrap().unwrap());
    }
    server.stop();
    let mut point = epoch.resume_point();
    let error = loop {
        match epoch
            .next()
            .expect("the epoch ends with an error, not early")
        {
            Ok(batch) => {
                delivered.push(batch);
                point = epoch.resume_point();
            }
            Err(error) => break error,
        }
    };
    assert!(epoch.next().is_none(), "nothing after the error");
    drop(epoch);
    let message = error.to_string();
    assert!(
        matches!(
            error,
            Error::Remote {
                attempts: 3,
                row_group: Some(_),
                ..
            }
        ),
        "{message}"
    );
    assert!(
        FILES
            .iter()
            .any(|name| message.contains(&format!("s3://kiln/data/{name}")))
            && message.contains("row group"),
        "{message}"
    );
    assert!(
        delivered.len() < 24,
        "the server stopped before the end of the epoch"
    );
    assert_eq!(delivered[..], expected[..delivered.len()]);
    let segments = || {
        std::fs::read_dir(cache_dir.path().join("remote"))
            .unwrap()
            .filter(|entry| {
                entry
                    .as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|e| e == "seg")
            })
            .count()
    };
    let cached = segments();
    assert!(
        (1..14).contains(&cached),
        "only the blocks read before the stop are cached ({cached} of 14)"
    );

    // The server comes back with the same objects: the epoch resumes where it stopped.
    server.restart();
    upload(&server, &paths);
    let resumed = loader.resume(&sampler, &request, &point).unwrap();
    delivered.extend(resumed.map(Result::unwrap));
    assert_eq!(delivered, expected);

    // Every block is now cached, and right: a whole epoch from the cache alone.
    server.stop();
    let from_cache: Vec<Vec<i64>> = loader
        .plan_epoch(&sampler, &request)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(from_cache, expected);
    assert_eq!(segments(), 14);
}
