//! The preprocessing cache: keys, verification and rebuild, crash safety, tiers, warming.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kiln_ml_cache::{Cached, CodecError, DiskCache, Error, PodCodec};
use kiln_ml_core::{BlockLayout, BlockSource, Fingerprint, FnTransform, ReadError, transform_fn};
use kiln_ml_testkit::MemorySource;

/// A transform that counts its calls, so tests can tell a hit from a recomputation.
fn counted(
    version: u64,
    calls: &Arc<AtomicU64>,
) -> FnTransform<impl Fn(u64) -> Result<Vec<f32>, Infallible> + use<>> {
    let calls = Arc::clone(calls);
    transform_fn("features", version, move |id: u64| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(vec![id as f32, (id * 2) as f32, version as f32])
    })
}

/// The usual fixture: `source()` under `counted(version)`, cached in `dir`.
fn cached_in(
    dir: &tempfile::TempDir,
    version: u64,
    calls: &Arc<AtomicU64>,
) -> Cached<MemorySource<u64>, impl kiln_ml_core::Transform<u64, Output = Vec<f32>> + use<>> {
    Cached::new(
        source(),
        counted(version, calls),
        DiskCache::open(dir.path()).unwrap(),
    )
}

fn source() -> MemorySource<u64> {
    MemorySource::with_ids(&[&[4, 3], &[5]])
}

fn expected(block: &kiln_ml_core::Block, version: u64) -> Vec<Vec<f32>> {
    block
        .samples()
        .map(|id| vec![id as f32, (id * 2) as f32, version as f32])
        .collect()
}

#[test]
fn hits_serve_what_the_transform_computed() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls);
    for round in 0..2 {
        for (index, block) in cached.blocks().iter().enumerate() {
            assert_eq!(
                cached.read_block(index as u32).unwrap(),
                expected(block, 1),
                "round {round}"
            );
        }
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        12,
        "each sample transformed once"
    );
    let stats = cached.stats();
    assert_eq!((stats.misses, stats.disk_hits), (3, 3));
    assert_eq!(stats.bytes_read, stats.bytes_written);
}

#[test]
fn a_flipped_byte_is_detected_reported_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls);
    let block = cached.blocks()[1];
    cached.read_block(1).unwrap();
    let path = cached.disk().segment_path(&cached.key(1));
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() - 6; // inside the last record
    bytes[middle] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    assert_eq!(
        cached.read_block(1).unwrap(),
        expected(&block, 1),
        "never served corrupt"
    );
    assert_eq!(
        calls.load(Ordering::Relaxed),
        6,
        "recomputed after the corruption"
    );
    let stats = cached.stats();
    assert_eq!(stats.corrupt_segments, 1);
    let reports = cached.disk().corrupt_segments();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].block, 1);
    assert_eq!(reports[0].path, path);
    assert!(
        reports[0].reason.contains("checksum mismatch"),
        "{}",
        reports[0].reason
    );
    // The rebuilt segment is whole again: a plain hit.
    assert_eq!(cached.read_block(1).unwrap(), expected(&block, 1));
    assert_eq!(cached.stats().disk_hits, 1);
}

#[test]
fn a_failed_write_serves_the_samples_uncached() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("cache");
    let calls = Arc::new(AtomicU64::new(0));
    let cached = Cached::new(source(), counted(1, &calls), DiskCache::open(&dir).unwrap());
    // The directory goes away under the open cache (a failure no permission can fake for root).
    std::fs::remove_dir_all(&dir).unwrap();
    let block = cached.blocks()[0];
    assert_eq!(cached.read_block(0).unwrap(), expected(&block, 1));
    let stats = cached.stats();
    assert_eq!(
        (stats.misses, stats.failed_writes, stats.bytes_written),
        (1, 1, 0)
    );
    // Nothing was kept: the next read computes the block again.
    let computed = calls.load(Ordering::SeqCst);
    assert!(computed > 0);
    assert_eq!(cached.read_block(0).unwrap(), expected(&block, 1));
    assert_eq!(calls.load(Ordering::SeqCst), 2 * computed);
    assert_eq!(cached.stats().failed_writes, 2);
    let error = cached.disk().last_write_error().unwrap();
    assert!(error.contains("cache"), "the error names the path: {error}");
    // Building the cache on purpose does fail, naming the write and where.
    let error = cached.warm().unwrap_err().to_string();
    assert!(error.contains("cache"), "the error names the path: {error}");
}

#[test]
fn a_crash_between_write_and_rename_leaves_the_cache_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls);
    let complete = cached
        .encode_block(0, &cached.compute_block(0).unwrap())
        .unwrap();
    // What a writer killed before its rename leaves: a partial temporary file named as
    // `write_atomic` names them (`.<segment name>.<random>.tmp`), no segment.
    let leftover = dir
        .path()
        .join(format!(".{}.a1b2c3.tmp", cached.key(0).file_name()));
    std::fs::write(&leftover, &complete[..complete.len() / 2]).unwrap();
    drop(cached);

    let reopened = DiskCache::open(dir.path()).unwrap();
    assert_eq!(
        reopened.stats().disk_bytes,
        0,
        "temporary files are not segments"
    );
    assert!(
        leftover.exists(),
        "a fresh temporary file is kept: its writer may still rename it"
    );
    let cached = Cached::new(source(), counted(1, &calls), reopened);
    let block = cached.blocks()[0];
    assert_eq!(cached.read_block(0).unwrap(), expected(&block, 1));
    let stats = cached.stats();
    assert_eq!(
        (stats.misses, stats.corrupt_segments),
        (1, 0),
        "a clean miss, nothing corrupt"
    );
    assert_eq!(cached.read_block(0).unwrap(), expected(&block, 1));
    assert_eq!(cached.stats().disk_hits, 1);
}

#[test]
fn a_changed_transform_fingerprint_misses() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(DiskCache::open(dir.path()).unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let v1 = Cached::new(source(), counted(1, &calls), Arc::clone(&disk));
    v1.warm().unwrap();
    let v2 = Cached::new(source(), counted(2, &calls), Arc::clone(&disk));
    assert_ne!(v1.key(0), v2.key(0));
    let block = v2.blocks()[0];
    assert_eq!(
        v2.read_block(0).unwrap(),
        expected(&block, 2),
        "no stale version-1 data"
    );
    assert_eq!(disk.stats().disk_hits, 0);
    // Both versions now live side by side.
    assert_eq!(v1.read_block(0).unwrap(), expected(&block, 1));
    assert_eq!(disk.stats().disk_hits, 1);
}

#[test]
fn warm_builds_everything_once_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let source = MemorySource::with_ids(&[&[50, 50, 7], &[31], &[0, 12]]);
    let cached = Cached::new(
        source,
        counted(1, &calls),
        DiskCache::open(dir.path()).unwrap(),
    );
    let report = cached.warm().unwrap();
    assert_eq!(report.blocks, 6);
    assert_eq!(report.built, 6);
    assert_eq!(report.bytes_written, cached.stats().bytes_written);
    assert_eq!(calls.load(Ordering::Relaxed), 150);
    let again = cached.warm().unwrap();
    assert_eq!((again.built, again.already_cached), (0, 6));
    for (index, block) in cached.blocks().iter().enumerate() {
        assert_eq!(cached.read_block(index as u32).unwrap(), expected(block, 1));
    }
    assert_eq!(calls.load(Ordering::Relaxed), 150);
}

/// The size of each block's segment, built without writing it.
fn segment_sizes(
    cached: &Cached<MemorySource<u64>, impl kiln_ml_core::Transform<u64, Output = Vec<f32>>>,
) -> Vec<u64> {
    (0..cached.num_blocks() as u32)
        .map(|block| {
            let samples = cached.compute_block(block).unwrap();
            cached.encode_block(block, &samples).unwrap().len() as u64
        })
        .collect()
}

/// Under a size limit, warming fills the cache up to it and leaves the other blocks out: it
/// does not build them only to evict what it built before.
#[test]
fn warm_stops_at_the_size_limit_without_evicting_what_it_built() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let sizes = segment_sizes(&cached_in(&dir, 1, &calls));
    let limit = sizes.iter().sum::<u64>() - 1;
    let limited = || {
        Cached::new(
            source(),
            counted(1, &calls),
            DiskCache::open(dir.path()).unwrap().with_limit_bytes(limit),
        )
    };
    let cached = limited();
    let report = cached.warm().unwrap();
    assert_eq!(report.blocks, 3);
    // Any two segments fit under the limit, all three do not.
    assert_eq!((report.built, report.left_out), (2, 1), "{report:?}");
    let stats = cached.stats();
    assert_eq!(stats.evictions, 0, "{stats:?}");
    assert!(stats.disk_bytes <= limit, "{stats:?}");
    assert_eq!(stats.disk_bytes, report.bytes_written, "{stats:?}");
    // Warming again finds what fit and leaves the rest out again.
    let again = limited().warm().unwrap();
    assert_eq!(
        (again.built, again.already_cached, again.left_out),
        (0, report.built, report.left_out),
        "{again:?}"
    );
    // A changed transform (new keys, the same sizes) makes room by evicting the old segments,
    // which belong to no block any more: its warm-up is not starved by them.
    let changed = Cached::new(
        source(),
        counted(2, &calls),
        DiskCache::open(dir.path()).unwrap().with_limit_bytes(limit),
    );
    let report = changed.warm().unwrap();
    assert_eq!((report.built, report.left_out), (2, 1), "{report:?}");
    let stats = changed.stats();
    assert!(stats.evictions >= 1, "{stats:?}");
    assert!(stats.disk_bytes <= limit, "{stats:?}");
}

/// Epochs read through a cache smaller than the dataset keep the segments it holds: a block
/// that does not fit is computed on every read, and never evicts the block read next (the
/// least recently used, in a sequential epoch), which would make every read a miss. A segment
/// larger than the whole limit is never written, so it evicts nothing.
#[test]
fn reads_under_a_limit_keep_what_the_cache_holds() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let sizes = segment_sizes(&cached_in(&dir, 1, &calls));
    let limit = sizes.iter().sum::<u64>() - 1;
    let cached = Cached::new(
        source(),
        counted(1, &calls),
        DiskCache::open(dir.path()).unwrap().with_limit_bytes(limit),
    );
    // No warm-up: the first epoch's misses fill the cache, in block order.
    for epoch in 0..3 {
        for (index, block) in cached.blocks().iter().enumerate() {
            assert_eq!(
                cached.read_block(index as u32).unwrap(),
                expected(block, 1),
                "epoch {epoch}, block {index}"
            );
        }
    }
    let stats = cached.stats();
    assert_eq!(stats.evictions, 0, "{stats:?}");
    // Blocks 0 and 1 are written in the first epoch and hit in the next two; block 2 is
    // computed in every epoch and declined every time.
    assert_eq!((stats.disk_hits, stats.misses), (4, 5), "{stats:?}");
    assert_eq!(stats.declined_writes, 3, "{stats:?}");
    assert_eq!(stats.disk_bytes, sizes[0] + sizes[1], "{stats:?}");
    // Room made (block 0's segment removed): the next miss of block 2 is written.
    assert!(cached.disk().remove(&cached.key(0)).unwrap());
    cached.read_block(2).unwrap();
    assert!(cached.disk().contains(&cached.key(2)));
    assert_eq!(cached.stats().declined_writes, 3);

    // A segment above the whole limit, of another source: declined, evicting nothing.
    let tiny = Cached::new(
        source(),
        counted(2, &calls),
        DiskCache::open(dir.path())
            .unwrap()
            .with_limit_bytes(sizes[0] - 1),
    );
    // Opening with a smaller limit evicts down to it; the read itself evicts nothing.
    let opened = tiny.stats();
    let before = std::fs::read_dir(dir.path()).unwrap().count();
    tiny.read_block(0).unwrap();
    let stats = tiny.stats();
    assert_eq!(stats.evictions, opened.evictions, "{stats:?}");
    assert_eq!(stats.declined_writes, 1, "{stats:?}");
    assert!(!tiny.disk().contains(&tiny.key(0)));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before);
}

/// The segments a warm-up finds are counted before it builds any: a built one does not evict
/// one it found (least recently used, on one thread, before it was read) only to rebuild it.
#[test]
fn warm_under_a_limit_never_evicts_the_segments_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let whole = cached_in(&dir, 1, &calls);
    whole.warm().unwrap();
    let limit = whole.stats().disk_bytes - 1;
    std::fs::remove_file(whole.disk().segment_path(&whole.key(0))).unwrap();
    let limited = Cached::new(
        source(),
        counted(1, &calls),
        DiskCache::open(dir.path()).unwrap().with_limit_bytes(limit),
    );
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let report = one_thread.install(|| limited.warm()).unwrap();
    assert_eq!(
        (report.built, report.already_cached, report.left_out),
        (0, 2, 1),
        "{report:?}"
    );
    assert_eq!(limited.stats().evictions, 0);
}

#[test]
fn warm_rebuilds_a_segment_that_verifies_but_does_not_fit_its_block() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls);
    // A well-formed segment under block 0's key holding one record for a block of 4 rows.
    let samples = cached.compute_block(0).unwrap();
    let short = cached.encode_block(0, &samples[..1]).unwrap();
    cached.disk().put(&cached.key(0), &short).unwrap();
    let report = cached.warm().unwrap();
    assert_eq!((report.built, report.already_cached), (3, 0));
    assert_eq!(cached.stats().corrupt_segments, 1);
    let reports = cached.disk().corrupt_segments();
    assert!(
        reports[0]
            .reason
            .contains("holds 1 records but the block has 4 rows"),
        "{reports:?}"
    );
    // Rebuilt by the warm-up, so reading it now is a plain hit.
    calls.store(0, Ordering::Relaxed);
    assert_eq!(
        cached.read_block(0).unwrap(),
        expected(&cached.blocks()[0], 1)
    );
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

#[test]
fn warm_counts_only_the_bytes_it_wrote_itself() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let disk = Arc::new(DiskCache::open(dir.path()).unwrap());
    let other = Arc::new(Cached::new(source(), counted(2, &calls), Arc::clone(&disk)));
    let once = std::sync::Once::new();
    // Another user of the same directory writes a segment while this one warms.
    let meanwhile = Arc::clone(&other);
    let transform = transform_fn("features", 1, move |id: u64| {
        once.call_once(|| drop(meanwhile.read_block(2).unwrap()));
        Ok::<_, Infallible>(vec![id as f32])
    });
    let cached = Cached::new(source(), transform, Arc::clone(&disk));
    let report = cached.warm().unwrap();
    let own: u64 = (0..3)
        .map(|block| {
            std::fs::metadata(disk.segment_path(&cached.key(block)))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(report.bytes_written, own);
    assert!(
        disk.stats().bytes_written > own,
        "the other segment was written"
    );
}

#[test]
fn warm_reports_a_panicking_transform_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let exploding = transform_fn("explodes", 1, |id: u64| {
        if id == 5 {
            panic!("cannot build a graph for sample {id}");
        }
        Ok::<_, Infallible>(id)
    });
    let cached = Cached::new(source(), exploding, DiskCache::open(dir.path()).unwrap());
    let error = cached.warm().unwrap_err();
    assert!(
        matches!(error, Error::Read(ReadError::Panicked { .. })),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains("block 1 (file 0)"), "{message}");
    assert!(
        message.contains("cannot build a graph for sample 5"),
        "{message}"
    );
}

#[test]
fn transform_errors_name_block_file_and_row() {
    #[derive(Debug, thiserror::Error)]
    #[error("sample {0} has no neighbours")]
    struct NoNeighbours(u64);
    let dir = tempfile::tempdir().unwrap();
    let failing = transform_fn("graph", 1, |id: u64| {
        if id == 9 {
            Err(NoNeighbours(id))
        } else {
            Ok(id)
        }
    });
    let cached = Cached::new(source(), failing, DiskCache::open(dir.path()).unwrap());
    let error = cached.read_block(2).unwrap_err();
    assert_eq!(
        error.to_string(),
        "transform failed on block 2 (file 1), row 2: sample 9 has no neighbours"
    );
    assert!(
        !cached.disk().contains(&cached.key(2)),
        "nothing cached for a failed block"
    );
}

#[test]
fn the_ram_tier_serves_repeated_reads_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls).with_ram_budget(1 << 20);
    for _ in 0..3 {
        for block in 0..3 {
            cached.read_block(block).unwrap();
        }
    }
    let stats = cached.stats();
    assert_eq!(stats.misses, 3);
    assert_eq!(stats.disk_hits, 0, "built segments go straight to RAM");
    assert_eq!(stats.ram_hits, 6);
    assert!(stats.ram_bytes > 0 && stats.ram_bytes <= 1 << 20);
    let tiny = cached_in(&dir, 1, &calls).with_ram_budget(16);
    tiny.read_block(0).unwrap();
    tiny.read_block(0).unwrap();
    assert_eq!((tiny.stats().ram_hits, tiny.stats().disk_hits), (0, 2));
    assert_eq!(tiny.stats().ram_bytes, 0);
}

#[test]
fn pod_records_are_viewed_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls).with_codec(PodCodec);
    let block = cached.blocks()[2];
    assert_eq!(cached.read_block(2).unwrap(), expected(&block, 1));
    assert_eq!(cached.read_block(2).unwrap(), expected(&block, 1));
    let segment = cached.disk().get(&cached.key(2)).unwrap().unwrap();
    assert_eq!(segment.pod_record::<f32>(1), Some(&[8.0f32, 16.0, 1.0][..]));
}

#[test]
fn concurrent_readers_agree_on_a_cold_cache() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let source = MemorySource::with_ids(&[&[40; 8], &[25; 4]]);
    let cached = Arc::new(Cached::new(
        source,
        counted(1, &calls),
        DiskCache::open(dir.path()).unwrap(),
    ));
    std::thread::scope(|scope| {
        for thread in 0..4u32 {
            let cached = Arc::clone(&cached);
            scope.spawn(move || {
                for round in 0..3u32 {
                    for step in 0..12u32 {
                        let block = (step + thread * 3 + round) % 12;
                        let expected = expected(&cached.blocks()[block as usize], 1);
                        assert_eq!(cached.read_block(block).unwrap(), expected);
                    }
                }
            });
        }
    });
    let stats = cached.stats();
    assert_eq!(stats.corrupt_segments, 0);
    assert_eq!(stats.disk_hits + stats.misses, 4 * 3 * 12);
    assert_eq!(
        cached.warm().unwrap().built,
        0,
        "every segment on disk is whole"
    );
}

#[test]
fn the_layout_fingerprint_combines_source_transform_and_codec() {
    let calls = Arc::new(AtomicU64::new(0));
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(DiskCache::open(dir.path()).unwrap());
    let a = Cached::new(source(), counted(1, &calls), Arc::clone(&disk));
    let b = Cached::new(source(), counted(2, &calls), Arc::clone(&disk));
    let c = Cached::new(source(), counted(1, &calls), Arc::clone(&disk)).with_codec(PodCodec);
    let fingerprints = [a.fingerprint(), b.fingerprint(), c.fingerprint()];
    assert_ne!(fingerprints[0], fingerprints[1]);
    assert_ne!(fingerprints[0], fingerprints[2]);
    assert_ne!(fingerprints[0], source().fingerprint());
    assert_eq!(a.blocks(), source().blocks());
    let _: Fingerprint = a.key(0).digest();
    // Another source under the same transform and codec: another fingerprint and key.
    let other = Cached::new(
        MemorySource::with_ids(&[&[4, 3], &[6]]),
        counted(1, &calls),
        Arc::clone(&disk),
    );
    assert_ne!(other.fingerprint(), fingerprints[0]);
    assert_ne!(other.key(0).digest(), a.key(0).digest());
}

/// A source that loses the last item of every block.
struct ShortBlocks(MemorySource<u64>);

impl BlockLayout for ShortBlocks {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.0.blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.0.fingerprint()
    }
}

impl BlockSource for ShortBlocks {
    type Item = u64;
    type Error = Infallible;

    fn read_block(&self, block: kiln_ml_core::BlockIndex) -> Result<Vec<u64>, Infallible> {
        let mut items = self.0.read_block(block).unwrap();
        items.pop();
        Ok(items)
    }
}

/// Counts the prefetch hints it is given, and those withdrawn.
struct Hinted {
    inner: MemorySource<u64>,
    hints: AtomicU64,
    withdrawn: AtomicU64,
}

impl BlockLayout for Hinted {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.inner.blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.inner.fingerprint()
    }
}

impl BlockSource for Hinted {
    type Item = u64;
    type Error = kiln_ml_testkit::MemorySourceError;

    fn read_block(&self, block: kiln_ml_core::BlockIndex) -> Result<Vec<u64>, Self::Error> {
        self.inner.read_block(block)
    }
    fn prefetch(&self, _: kiln_ml_core::BlockIndex) {
        self.hints.fetch_add(1, Ordering::Relaxed);
    }
    fn cancel_prefetch(&self, _: kiln_ml_core::BlockIndex) {
        self.withdrawn.fetch_add(1, Ordering::Relaxed);
    }
}

/// A hint passed on for a block that another user of the directory then cached is withdrawn
/// when the block is served from disk (the inner source would otherwise keep what it fetched).
#[test]
fn a_hint_for_a_block_served_from_disk_is_withdrawn() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(DiskCache::open(dir.path()).unwrap());
    let identity = || transform_fn("identity", 1, Ok::<u64, Infallible>);
    let hinted = Cached::new(
        Hinted {
            inner: source(),
            hints: AtomicU64::new(0),
            withdrawn: AtomicU64::new(0),
        },
        identity(),
        Arc::clone(&disk),
    );
    let other = Cached::new(source(), identity(), Arc::clone(&disk));
    hinted.prefetch(0);
    assert_eq!(hinted.inner().hints.load(Ordering::Relaxed), 1);
    other.read_block(0).unwrap();
    hinted.read_block(0).unwrap();
    assert_eq!(hinted.inner().withdrawn.load(Ordering::Relaxed), 1);
}

/// A block with fewer items than rows is refused, naming the block and both counts, and
/// nothing is cached: caching it would serve the short block under valid checksums for good.
#[test]
fn a_source_returning_the_wrong_number_of_items_is_refused_and_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let identity = transform_fn("identity", 1, Ok::<u64, Infallible>);
    let cached = Cached::new(
        ShortBlocks(MemorySource::with_ids(&[&[3, 2]])),
        identity,
        DiskCache::open(dir.path()).unwrap(),
    );
    for _ in 0..2 {
        let error = cached.read_block(1).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, Error::Read(ReadError::Source { block: 1, .. })),
            "{message}"
        );
        assert!(
            message.contains("1 items for a block of 2 rows"),
            "{message}"
        );
    }
    assert_eq!(cached.stats().disk_hits, 0);
}

/// Stores a sample's first value as 4 little-endian bytes; decoding fails on the values in
/// `unreadable` (a codec with a bug that only some records show).
struct FirstValueCodec {
    unreadable: &'static [f32],
}

impl kiln_ml_cache::Codec<Vec<f32>> for FirstValueCodec {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder().str("first value").finish()
    }

    fn encode(&self, item: &Vec<f32>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(&item[0].to_le_bytes());
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<f32>, CodecError> {
        let value = f32::from_le_bytes(bytes.try_into().map_err(|_| CodecError::new("length"))?);
        if self.unreadable.contains(&value) {
            return Err(CodecError::new(format!("{value} does not decode")));
        }
        Ok(vec![value])
    }
}

#[test]
fn a_codec_that_cannot_read_its_own_records_is_named_when_the_block_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    // Block 1 holds samples 4, 5 and 6: its first record is 4.
    let cached = cached_in(&dir, 1, &calls).with_codec(FirstValueCodec { unreadable: &[4.0] });
    let error = cached.read_block(1).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            Error::Encode {
                block: 1,
                row: 0,
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("cannot decode what it encoded (4 does not decode)"),
        "{message}"
    );
    assert!(message.contains(&cached.describe_block(1)), "{message}");
    assert_eq!(cached.stats().bytes_written, 0, "nothing was cached");
}

/// A record that does not decode past the first is named too: block 0 holds samples 0..4, and
/// its second record (1.0) does not decode. Nothing is cached, so no later read serves or
/// discards it.
#[test]
fn a_record_past_the_first_that_does_not_decode_is_named_when_the_block_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls).with_codec(FirstValueCodec { unreadable: &[1.0] });
    let error = cached.read_block(0).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Encode {
                block: 0,
                row: 1,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(cached.stats().bytes_written, 0, "nothing was cached");
}

/// [`FirstValueCodec`] that stops decoding once `broken` is set (a decoder that changed after
/// the segments were written).
struct BreakableCodec(Arc<AtomicBool>);

impl kiln_ml_cache::Codec<Vec<f32>> for BreakableCodec {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder().str("breakable").finish()
    }

    fn encode(&self, item: &Vec<f32>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        kiln_ml_cache::Codec::encode(&FirstValueCodec { unreadable: &[] }, item, out)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<f32>, CodecError> {
        if self.0.load(Ordering::Relaxed) {
            return Err(CodecError::new("broken"));
        }
        kiln_ml_cache::Codec::decode(&FirstValueCodec { unreadable: &[] }, bytes)
    }
}

#[test]
fn a_ram_segment_that_does_not_decode_is_no_hit_and_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(AtomicBool::new(false));
    let cached = cached_in(&dir, 1, &calls)
        .with_codec(BreakableCodec(Arc::clone(&broken)))
        .with_ram_budget(1 << 20);
    cached.read_block(0).unwrap();
    assert!(cached.stats().ram_bytes > 0);
    broken.store(true, Ordering::Relaxed);
    // The RAM and disk copies no longer decode: neither is a hit, both are dropped, and the
    // block built again is refused by name.
    let error = cached.read_block(0).unwrap_err();
    assert!(matches!(error, Error::Encode { block: 0, .. }), "{error}");
    let stats = cached.stats();
    assert_eq!(stats.ram_hits, 0, "{stats:?}");
    assert_eq!(stats.disk_hits, 0, "{stats:?}");
    assert_eq!(stats.ram_bytes, 0, "{stats:?}");
    assert_eq!(calls.load(Ordering::Relaxed), 8, "built twice");
}

/// The default codec, counting how often it is asked for its fingerprint.
struct FingerprintCounting(Arc<AtomicU64>);

impl kiln_ml_cache::Codec<Vec<f32>> for FingerprintCounting {
    fn fingerprint(&self) -> Fingerprint {
        self.0.fetch_add(1, Ordering::Relaxed);
        kiln_ml_cache::Codec::<Vec<f32>>::fingerprint(&kiln_ml_cache::BincodeCodec)
    }
    fn encode(&self, item: &Vec<f32>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        kiln_ml_cache::BincodeCodec.encode(item, out)
    }
    fn decode(&self, bytes: &[u8]) -> Result<Vec<f32>, CodecError> {
        kiln_ml_cache::BincodeCodec.decode(bytes)
    }
}

/// The codec's fingerprint (for bincode, a trace of the sample type's serde layout) is taken
/// once per cache, not once per block read; a cache given another codec takes the new one's.
#[test]
fn the_codec_is_fingerprinted_once_per_cache() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(0));
    let cached = cached_in(&dir, 1, &calls).with_codec(FingerprintCounting(Arc::clone(&first)));
    for _ in 0..3 {
        for block in 0..cached.blocks().len() as u32 {
            cached.read_block(block).unwrap();
        }
    }
    let key = cached.key(0);
    let _ = cached.fingerprint();
    assert_eq!(first.load(Ordering::Relaxed), 1);
    let second = Arc::new(AtomicU64::new(0));
    let recoded = cached.with_codec(FingerprintCounting(Arc::clone(&second)));
    assert_eq!(
        recoded.key(0),
        key,
        "the same codec's fingerprint, taken afresh"
    );
    assert_eq!(second.load(Ordering::Relaxed), 1);
}
