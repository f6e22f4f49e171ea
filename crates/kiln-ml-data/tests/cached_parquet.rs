//! kiln-ml-cache over the Parquet source: keys that follow the files, errors that name them.

mod common;

use std::convert::Infallible;

use common::{id_decoder, write_dataset};
use kiln_ml_cache::{Cached, DiskCache};
use kiln_ml_core::{BlockLayout, BlockSource, PlanRequest, ReadError, transform_fn};
use kiln_ml_data::{Error, Loader, LoaderConfig, NoCollate, ParquetSource};
use kiln_ml_testkit::InOrderSampler;

/// The `id` column of every Parquet file in `dir`.
fn ids(dir: &std::path::Path) -> ParquetSource<impl kiln_ml_data::RowDecoder<Item = i64> + use<>> {
    ParquetSource::builder()
        .dir(dir)
        .build_with(id_decoder())
        .unwrap()
}

/// The error that ends an in-order epoch of `source` under a loader.
fn epoch_error<S>(source: S) -> Error
where
    S: BlockSource + BlockLayout + 'static,
    S::Item: Clone + 'static,
{
    let loader = Loader::new(source, NoCollate, LoaderConfig::new().with_workers(1)).unwrap();
    loader
        .plan_epoch(&InOrderSampler::new(5), &PlanRequest::new(0, 0))
        .unwrap()
        .find_map(Result::err)
        .expect("the epoch fails")
}

#[test]
fn a_changed_source_file_misses() {
    let data = tempfile::tempdir().unwrap();
    let paths = write_dataset(data.path(), &[20], 10);
    let cache = tempfile::tempdir().unwrap();
    let to_u64 = transform_fn("to-u64", 1, |id: i64| Ok::<_, Infallible>(id as u64));
    let open = || {
        Cached::new(
            ids(data.path()),
            to_u64.clone(),
            DiskCache::open(cache.path()).unwrap(),
        )
    };
    open().warm().unwrap();
    assert_eq!(open().warm().unwrap().built, 0, "unchanged files hit");
    common::write_ids(&paths[0], 100..120, 10);
    let file = std::fs::File::options()
        .write(true)
        .open(&paths[0])
        .unwrap();
    let later = file.metadata().unwrap().modified().unwrap() + std::time::Duration::from_secs(2);
    file.set_modified(later).unwrap();
    let changed = open();
    assert_eq!(
        changed.read_block(0).unwrap()[0],
        100,
        "the rewritten file is read, not the cache"
    );
    assert_eq!(changed.stats().disk_hits, 0);
}

/// Over Parquet, a failing transform names the file and the row group, not just an index; under
/// the loader it is the cache's error, with the same message.
#[test]
fn transform_errors_over_parquet_name_the_file_and_row_group() {
    let data = tempfile::tempdir().unwrap();
    let paths = write_dataset(data.path(), &[10, 10], 4);
    let source = ids(data.path());
    assert_eq!(
        source.describe_block(3),
        format!("block 3 (row group 0 of {})", paths[1].display())
    );
    let reject = transform_fn("reject", 1, |id: i64| {
        if id == 13 {
            Err(std::io::Error::other("id 13 is cursed"))
        } else {
            Ok(id)
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let cached = Cached::new(source, reject, DiskCache::open(cache.path()).unwrap());
    let error = cached.read_block(3).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "transform failed on block 3 (row group 0 of {}), row 3: id 13 is cursed",
            paths[1].display()
        )
    );
    let through_loader = epoch_error(cached);
    assert!(
        matches!(
            through_loader,
            Error::Cache(kiln_ml_cache::Error::Transform { block: 3, .. })
        ),
        "{through_loader}"
    );
    assert_eq!(through_loader.to_string(), error);
}

/// A Parquet error read through the cache reaches kiln-ml-data's callers as the Parquet error it
/// is, not wrapped in the cache's `Source` variant.
#[test]
fn parquet_errors_through_the_cache_surface_as_themselves() {
    let data = tempfile::tempdir().unwrap();
    let paths = write_dataset(data.path(), &[30], 10);
    let cache = tempfile::tempdir().unwrap();
    let to_u64 = transform_fn("to-u64", 1, |id: i64| Ok::<_, Infallible>(id as u64));
    let cached = Cached::new(
        ids(data.path()),
        to_u64,
        DiskCache::open(cache.path()).unwrap(),
    );
    common::truncate_to_half(&paths[0]);

    let error = cached.read_block(2).unwrap_err();
    assert!(
        matches!(
            error,
            kiln_ml_cache::Error::Read(ReadError::Source { block: 2, .. })
        ),
        "{error}"
    );
    let error = Error::from(error);
    assert!(matches!(error, Error::FileChanged { .. }), "{error}");

    let error = epoch_error(cached);
    assert!(matches!(error, Error::FileChanged { .. }), "{error}");
    assert!(error.to_string().contains("part-000.parquet"), "{error}");
}
