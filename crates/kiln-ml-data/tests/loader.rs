//! The loader: exactly-once delivery in plan order for any worker count, resume, errors and
//! panics surfacing as errors, clean stops, observers, Burn collation.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use burn::backend::Flex;
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use common::{pair_decoder, write_dataset};
use kiln_ml_cache::{Cached, DiskCache};
use kiln_ml_core::{
    BlockIndex, BlockLayout, BlockSource, Event, Layout, Plan, PlanRequest, Position, ReadError,
    Result, SampleId, Sampler, Shard, transform_fn,
};
use kiln_ml_data::arrow_array::RecordBatch;
use kiln_ml_data::{
    BurnCollate, BurnColumnar, ColumnBatcher, Error, Loader, LoaderConfig, NoCollate,
    ParquetSource, collate_fn, float_matrix, int_vector,
};
use kiln_ml_sampler::{BlockShuffleConfig, RemainderPolicy};
use kiln_ml_testkit::{InOrderSampler, MemorySource, RecordingObserver};
use proptest::prelude::*;

/// A scrambled permutation of every sample, batches of `batch_size`: every block stays live
/// for most of the epoch, the hardest case for ordering and freeing.
fn scrambled_plan(layout: &dyn BlockLayout, batch_size: u64, epoch: u64) -> Plan {
    let mut order: Vec<SampleId> = (0..layout.num_samples()).collect();
    order.sort_by_key(|&id| (id.wrapping_mul(2_654_435_761).wrapping_add(epoch * 97)) % 1_000_003);
    Plan::new(epoch, Shard::SINGLE, batch_size, order, layout).unwrap()
}

/// Visits blocks last to first, each in row order: a non-trivial plan with exact resume.
struct BlocksReversed {
    batch_size: u64,
}

impl Sampler for BlocksReversed {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        let order = layout
            .blocks()
            .iter()
            .rev()
            .flat_map(|block| block.samples())
            .collect();
        Plan::new(request.epoch, request.shard, self.batch_size, order, layout)
    }
}

fn ids_loader(
    source: MemorySource<u64>,
    config: LoaderConfig,
) -> Loader<MemorySource<u64>, NoCollate> {
    Loader::new(source, NoCollate, config).unwrap()
}

#[test]
fn exactly_once_and_identical_for_1_2_and_4_workers() {
    let data = tempfile::tempdir().unwrap();
    write_dataset(data.path(), &[130, 7, 64, 301, 1, 88], 50);
    let mut outputs = Vec::new();
    for workers in [1, 2, 4] {
        let cache = tempfile::tempdir().unwrap();
        let source = ParquetSource::builder()
            .dir(data.path())
            .build_with(pair_decoder())
            .unwrap();
        let scale = transform_fn("scale", 1, |(id, x): (i64, f32)| {
            Ok::<_, Infallible>((id as u64, x * 4.0))
        });
        let cached = Cached::new(source, scale, DiskCache::open(cache.path()).unwrap());
        let config = LoaderConfig::new()
            .with_workers(workers)
            .with_prefetch_batches(3);
        let loader = Loader::new(cached, NoCollate, config).unwrap();
        for epoch in 0..2 {
            // A scrambled permutation, then kiln-ml-sampler's block shuffle.
            let plan = if epoch == 0 {
                scrambled_plan(loader.source().as_ref(), 16, epoch)
            } else {
                BlockShuffleConfig::default()
                    .with_open_blocks(4)
                    .with_buffer_samples(64)
                    .with_batch_size(16)
                    .with_remainder(RemainderPolicy::Uneven)
                    .init()
                    .unwrap()
                    .plan(loader.source().as_ref(), &PlanRequest::new(3, epoch))
                    .unwrap()
            };
            let order = plan.order().to_vec();
            let batches: Vec<Vec<(u64, f32)>> = loader
                .epoch(plan)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let flat: Vec<u64> = batches.iter().flatten().map(|&(id, _)| id).collect();
            assert_eq!(flat, order, "plan order, workers {workers}, epoch {epoch}");
            let mut sorted = flat.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..591).collect::<Vec<_>>(),
                "each sample exactly once"
            );
            assert!(
                batches
                    .iter()
                    .flatten()
                    .all(|&(id, x)| x == id as f32 * 2.0)
            );
            assert!(
                batches[..batches.len() - 1]
                    .iter()
                    .all(|batch| batch.len() == 16)
            );
            outputs.push((workers, epoch, batches));
        }
        let stats = loader.source().stats();
        assert_eq!(
            stats.misses, 16,
            "epoch 0 builds every segment (workers {workers})"
        );
        assert_eq!(
            stats.disk_hits, 16,
            "epoch 1 reads them back (workers {workers})"
        );
    }
    for (workers, epoch, batches) in &outputs[2..] {
        let reference = &outputs[*epoch as usize].2;
        assert!(
            batches == reference,
            "workers {workers} differ from 1 worker in epoch {epoch}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn batches_are_the_plan_cut_in_order(
        files in prop::collection::vec(prop::collection::vec(0u64..12, 0..4), 1..5),
        seed in any::<u64>(),
        batch_size in 1u64..9,
        workers in 1usize..5,
        prefetch in 1usize..4,
        // 0 to 2 blocks read ahead: the datasets have up to 16, so the limit binds.
        read_ahead in 0usize..3,
        drop_last in any::<bool>(),
    ) {
        let files: Vec<&[u64]> = files.iter().map(Vec::as_slice).collect();
        let source = MemorySource::with_ids(&files);
        let samples = source.num_samples();
        let mut order: Vec<u64> = (0..samples).collect();
        order.sort_by_key(|&id| id.wrapping_mul(seed | 1).rotate_left(17) ^ seed);
        let plan = Plan::new(0, Shard::SINGLE, batch_size, order.clone(), &source).unwrap();
        let config = LoaderConfig::new()
            .with_workers(workers)
            .with_prefetch_batches(prefetch)
            .with_read_ahead_blocks(read_ahead)
            .with_drop_last(drop_last);
        let loader = ids_loader(source, config);
        let batches: Vec<Vec<u64>> = loader.epoch(plan).unwrap().collect::<Result<_, _>>().unwrap();
        let mut expected: Vec<Vec<u64>> = order.chunks(batch_size as usize).map(<[u64]>::to_vec).collect();
        if drop_last && expected.last().is_some_and(|last| last.len() < batch_size as usize) {
            expected.pop();
        }
        prop_assert_eq!(batches, expected);
    }
}

#[test]
fn drop_last_drops_only_a_short_tail() {
    let source = MemorySource::with_ids(&[&[6, 4]]);
    let loader = ids_loader(source, LoaderConfig::new().with_drop_last(true));
    let plan = InOrderSampler::new(4)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 3))
        .unwrap();
    let mut epoch = loader.epoch(plan).unwrap();
    assert_eq!(epoch.batches(), 2);
    let batches: Vec<Vec<u64>> = epoch.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(batches, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(epoch.position(), Position::start_of(4));
}

#[test]
fn resuming_from_a_position_delivers_exactly_the_rest() {
    let sampler = BlocksReversed { batch_size: 5 };
    let request = PlanRequest::new(11, 2);
    let source = MemorySource::with_ids(&[&[7, 3], &[9], &[4, 4]]);
    let loader = ids_loader(source, LoaderConfig::new().with_workers(2));
    let full: Vec<Vec<u64>> = loader
        .plan_epoch(&sampler, &request)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let observer = Arc::new(RecordingObserver::new());
    let loader = ids_loader(
        MemorySource::with_ids(&[&[7, 3], &[9], &[4, 4]]),
        LoaderConfig::new().with_workers(3),
    )
    .with_observer(Arc::clone(&observer));
    let mut first = loader.plan_epoch(&sampler, &request).unwrap();
    let head: Vec<Vec<u64>> = first.by_ref().take(3).collect::<Result<_, _>>().unwrap();
    let position = first.position();
    assert_eq!(
        position,
        Position {
            epoch: 2,
            consumed: 15
        }
    );
    drop(first);
    let tail: Vec<Vec<u64>> = loader
        .resume_epoch(&sampler, &request, position)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(head, full[..3]);
    assert_eq!(tail, full[3..]);
    let batch_indices: Vec<u64> = observer
        .events()
        .iter()
        .filter_map(|event| match event {
            Event::BatchLoaded { batch, .. } => Some(*batch),
            _ => None,
        })
        .collect();
    assert_eq!(batch_indices, (0..full.len() as u64).collect::<Vec<_>>());
}

/// Size-budget batches (the length-aware block shuffle): the loader delivers the plan's batches
/// as cut, every sample once, and a resumed epoch delivers exactly the rest, with the batch
/// indices of the uninterrupted one.
#[test]
fn size_budget_batches_are_delivered_as_planned_and_resume_exactly() {
    let blocks: Vec<Vec<u64>> = (0..12).map(|file| vec![20 + file % 5, 9]).collect();
    let blocks: Vec<&[u64]> = blocks.iter().map(Vec::as_slice).collect();
    let source = || MemorySource::with_ids(&blocks);
    let samples = source().num_samples();
    // Sizes spread from 1 to 400, so batches hold from 2 to hundreds of samples.
    let sizes: Vec<u64> = (0..samples).map(|id| 1 + (id * 7919) % 400).collect();
    let sampler = BlockShuffleConfig::default()
        .with_open_blocks(4)
        .with_buffer_samples(64)
        .length_aware(800, true, sizes.clone())
        .unwrap();
    let request = PlanRequest::new(5, 1);
    let plan = sampler.plan(&source(), &request).unwrap();
    let loader = ids_loader(
        source(),
        LoaderConfig::new().with_workers(2).with_drop_last(true),
    );
    let full: Vec<Vec<u64>> = loader
        .plan_epoch(&sampler, &request)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(full.len() as u64, plan.batch_count());
    let mut seen: Vec<u64> = full.concat();
    seen.sort_unstable();
    assert_eq!(seen, (0..samples).collect::<Vec<_>>(), "every sample once");
    for (batch, ids) in full.iter().enumerate() {
        let range = plan.batch_range(batch as u64);
        assert_eq!(
            ids[..],
            plan.order()[range.start as usize..range.end as usize]
        );
        let longest = ids.iter().map(|&id| sizes[id as usize]).max().unwrap();
        assert!(ids.len() == 1 || ids.len() as u64 * longest <= 800);
    }
    let sizes_of = |batch: &Vec<u64>| batch.len();
    assert!(full.iter().map(sizes_of).max() > full.iter().map(sizes_of).min());

    let observer = Arc::new(RecordingObserver::new());
    let loader = ids_loader(source(), LoaderConfig::new().with_workers(3))
        .with_observer(Arc::clone(&observer));
    let mut first = loader.plan_epoch(&sampler, &request).unwrap();
    let head: Vec<Vec<u64>> = first.by_ref().take(5).collect::<Result<_, _>>().unwrap();
    let position = first.position();
    assert_eq!(
        position.consumed,
        full[..5].iter().map(Vec::len).sum::<usize>() as u64
    );
    drop(first);
    let tail: Vec<Vec<u64>> = loader
        .resume_epoch(&sampler, &request, position)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(head, full[..5]);
    assert_eq!(tail, full[5..]);
    let batch_indices: Vec<u64> = observer
        .events()
        .iter()
        .filter_map(|event| match event {
            Event::BatchLoaded { batch, .. } => Some(*batch),
            _ => None,
        })
        .collect();
    assert_eq!(batch_indices, (0..full.len() as u64).collect::<Vec<_>>());
}

/// A resume point carries the stream's identity: the loader resumes it on the same data and
/// refuses it on other files, another seed or other sampler settings (`resume_epoch` with the
/// bare position is the explicit opt-out).
#[test]
fn a_resume_point_refuses_other_data() {
    let files: &[&[u64]] = &[&[7, 3], &[9], &[4, 4]];
    let sampler = BlockShuffleConfig::default()
        .with_batch_size(3)
        .with_remainder(RemainderPolicy::Drop)
        .init()
        .unwrap();
    let request = PlanRequest::new(11, 0);
    let loader = ids_loader(MemorySource::with_ids(files), LoaderConfig::new());
    let mut first = loader.plan_epoch(&sampler, &request).unwrap();
    first.by_ref().take(2).for_each(drop);
    let point = first.resume_point();
    assert_eq!(point.data_key, first.data_key());
    assert!(point.data_key.is_some());
    let json = serde_json::to_string(&point).unwrap();
    let point: kiln_ml_core::ResumePoint = serde_json::from_str(&json).unwrap();
    drop(first);

    let rest: Vec<Vec<u64>> = loader
        .resume(&sampler, &request, &point)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rest.len(), 9 - 2, "27 samples make 9 batches of 3, 2 taken");

    let grown = ids_loader(
        MemorySource::with_ids(&[&[7, 3], &[9], &[4, 4], &[3]]),
        LoaderConfig::new(),
    );
    let other_seed = PlanRequest::new(12, 0);
    let other_batch = BlockShuffleConfig::default()
        .with_batch_size(1)
        .init()
        .unwrap();
    let refusals = [
        grown.resume(&sampler, &request, &point).err(),
        loader.resume(&sampler, &other_seed, &point).err(),
        loader.resume(&other_batch, &request, &point).err(),
    ];
    for error in refusals {
        let error = error.expect("resuming onto other data must fail");
        assert!(matches!(error, Error::DataChanged { .. }), "{error}");
        assert!(error.to_string().contains("resume_epoch"), "{error}");
    }
    assert!(
        grown
            .resume_epoch(&sampler, &request, point.position)
            .is_ok()
    );
}

#[test]
fn a_failed_read_ends_the_epoch_with_an_error_after_every_earlier_batch() {
    let source = MemorySource::with_ids(&[&[4, 4], &[4, 4]]);
    source.fail_block(2);
    let loader = ids_loader(source, LoaderConfig::new().with_workers(4));
    let plan = InOrderSampler::new(3)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let mut epoch = loader.epoch(plan).unwrap();
    let results: Vec<_> = epoch.by_ref().collect();
    // Block 2 holds samples 8..12; sample 8 is in batch 2 (samples 6..9).
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].as_ref().unwrap(), &vec![0, 1, 2]);
    assert_eq!(results[1].as_ref().unwrap(), &vec![3, 4, 5]);
    let error = results[2].as_ref().unwrap_err();
    assert_eq!(
        error.to_string(),
        "reading block 2 (file 1) failed: injected failure reading block 2 of file 1"
    );
    assert!(epoch.next().is_none(), "nothing after the error");
    assert_eq!(
        epoch.position(),
        Position {
            epoch: 0,
            consumed: 6
        }
    );
}

/// Blocks 0 and 3 fail, block 0 only after block 3 has.
struct TwoFailures {
    inner: MemorySource<u64>,
    block_3_failed: AtomicBool,
}

impl BlockLayout for TwoFailures {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.inner.blocks()
    }
    fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
        self.inner.fingerprint()
    }
}

impl BlockSource for TwoFailures {
    type Item = u64;
    type Error = std::io::Error;
    fn read_block(&self, block: BlockIndex) -> std::result::Result<Vec<u64>, Self::Error> {
        match block {
            0 => {
                // Fails only after block 3 has failed (bounded: block 3 has a worker of its own).
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !self.block_3_failed.load(Ordering::SeqCst)
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Block 3's error still travels to the coordinator: let it get there first.
                std::thread::sleep(Duration::from_millis(20));
                Err(std::io::Error::other("block 0 is unreadable"))
            }
            3 => {
                self.block_3_failed.store(true, Ordering::SeqCst);
                Err(std::io::Error::other("block 3 is unreadable"))
            }
            _ => Ok(self.inner.read_block(block).unwrap()),
        }
    }
}

#[test]
fn of_two_failing_blocks_in_a_batch_the_error_names_the_first_in_schedule_order() {
    // Four one-row blocks in one batch: block 3's failure arrives first, block 0's is first in
    // the schedule. Which one is named must not depend on which worker finishes first.
    let source = TwoFailures {
        inner: MemorySource::with_ids(&[&[1, 1, 1, 1]]),
        block_3_failed: AtomicBool::new(false),
    };
    let loader = Loader::new(source, NoCollate, LoaderConfig::new().with_workers(4)).unwrap();
    let plan = InOrderSampler::new(4)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let results: Vec<_> = loader.epoch(plan).unwrap().collect();
    assert_eq!(results.len(), 1);
    let error = results[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("block 0 is unreadable"), "{error}");
}

#[test]
fn a_panicking_transform_surfaces_as_an_error() {
    let cache = tempfile::tempdir().unwrap();
    let exploding = transform_fn("explodes", 1, |id: u64| {
        if id == 13 {
            panic!("graph construction failed for sample {id}");
        }
        Ok::<_, Infallible>(id)
    });
    let source = MemorySource::with_ids(&[&[5, 5], &[5, 5]]);
    let cached = Cached::new(source, exploding, DiskCache::open(cache.path()).unwrap());
    let loader = Loader::new(cached, NoCollate, LoaderConfig::new().with_workers(2)).unwrap();
    let plan = InOrderSampler::new(5)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let results: Vec<_> = loader.epoch(plan).unwrap().collect();
    assert_eq!(results.len(), 3);
    assert!(results[..2].iter().all(Result::is_ok));
    let error = results[2].as_ref().unwrap_err();
    assert!(
        matches!(error, Error::Read(ReadError::Panicked { .. })),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains("reading block 2 (file 1)"), "{message}");
    assert!(
        message.contains("graph construction failed for sample 13"),
        "{message}"
    );
}

#[test]
fn a_panicking_collation_surfaces_as_an_error() {
    let source = MemorySource::with_ids(&[&[10]]);
    let collate = collate_fn(|ids: Vec<u64>| {
        assert!(!ids.contains(&7), "sample 7 cannot be collated");
        ids.len()
    });
    let loader = Loader::new(source, collate, LoaderConfig::new()).unwrap();
    let plan = InOrderSampler::new(3)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let results: Vec<_> = loader.epoch(plan).unwrap().collect();
    assert_eq!(results.len(), 3);
    let message = results[2].as_ref().unwrap_err().to_string();
    assert!(message.contains("collating batch 2"), "{message}");
    assert!(message.contains("sample 7 cannot be collated"), "{message}");
}

/// Sleeps on every read and counts reads and prefetch hints, to observe what happens after a
/// drop.
struct SlowSource {
    inner: MemorySource<u64>,
    reads: AtomicU64,
    hints: AtomicU64,
    cancelled_hints: AtomicU64,
}

impl SlowSource {
    fn new(inner: MemorySource<u64>) -> Self {
        Self {
            inner,
            reads: AtomicU64::new(0),
            hints: AtomicU64::new(0),
            cancelled_hints: AtomicU64::new(0),
        }
    }
}

impl BlockLayout for SlowSource {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.inner.blocks()
    }
    fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
        self.inner.fingerprint()
    }
}

impl BlockSource for SlowSource {
    type Item = u64;
    type Error = kiln_ml_testkit::MemorySourceError;
    fn read_block(&self, block: BlockIndex) -> std::result::Result<Vec<u64>, Self::Error> {
        std::thread::sleep(Duration::from_millis(5));
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_block(block)
    }
    fn prefetch(&self, _block: BlockIndex) {
        self.hints.fetch_add(1, Ordering::Relaxed);
    }
    fn cancel_prefetch(&self, _block: BlockIndex) {
        self.cancelled_hints.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn dropping_an_epoch_midway_stops_its_work_and_the_loader_stays_usable() {
    let source = SlowSource::new(MemorySource::with_ids(&[&[4; 200]]));
    let (workers, prefetch_batches, read_ahead_blocks) = (2, 2, 2);
    let config = LoaderConfig::new()
        .with_workers(workers)
        .with_prefetch_batches(prefetch_batches)
        .with_read_ahead_blocks(read_ahead_blocks);
    let loader = Loader::new(source, NoCollate, config).unwrap();
    let source = Arc::clone(loader.source());
    let sampler = InOrderSampler::new(4);
    let mut epoch = loader
        .plan_epoch(&sampler, &PlanRequest::new(0, 0))
        .unwrap();
    assert_eq!(epoch.next().unwrap().unwrap(), vec![0, 1, 2, 3]);
    drop(epoch);
    // The same loader runs a complete epoch afterwards: every block once more.
    let plan = InOrderSampler::new(100)
        .plan(source.as_ref(), &PlanRequest::new(0, 1))
        .unwrap();
    let batches: Vec<Vec<u64>> = loader
        .epoch(plan)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(batches.len(), 8);
    assert_eq!(batches.concat(), (0..800).collect::<Vec<_>>());
    // Dropping the loader joins its workers, once they ran every queued job: the count is
    // final, with no clock involved. The dropped epoch read at most its window (the taken
    // batch, the prefetched ones, the read-ahead) and what its workers had started, not the
    // 199 blocks left of it.
    drop(loader);
    let dropped_epoch_reads = source.reads.load(Ordering::Relaxed) - 200;
    let window = 1 + prefetch_batches + read_ahead_blocks + workers;
    assert!(
        dropped_epoch_reads <= window as u64,
        "{dropped_epoch_reads} blocks read by the dropped epoch (at most {window})"
    );
}

#[test]
fn a_dropped_epoch_withdraws_the_prefetch_hints_it_will_not_read() {
    let source = SlowSource::new(MemorySource::with_ids(&[&[4; 200]]));
    // One worker and a deep read-ahead: most scheduled reads are still queued at the drop.
    let config = LoaderConfig::new()
        .with_workers(1)
        .with_prefetch_batches(2)
        .with_read_ahead_blocks(16);
    let loader = Loader::new(source, NoCollate, config).unwrap();
    let mut epoch = loader
        .plan_epoch(&InOrderSampler::new(4), &PlanRequest::new(0, 0))
        .unwrap();
    assert_eq!(epoch.next().unwrap().unwrap(), vec![0, 1, 2, 3]);
    drop(epoch);
    let source = loader.source();
    let settled = || {
        source.hints.load(Ordering::Relaxed)
            == source.reads.load(Ordering::Relaxed) + source.cancelled_hints.load(Ordering::Relaxed)
    };
    // The queued jobs run (to abandon their reads) on the worker; bounded wait for them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !settled() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every hint was either read or withdrawn: a remote source holds nothing for the epoch.
    assert!(
        settled(),
        "{} hints, {} reads, {} withdrawn",
        source.hints.load(Ordering::Relaxed),
        source.reads.load(Ordering::Relaxed),
        source.cancelled_hints.load(Ordering::Relaxed)
    );
    assert!(source.cancelled_hints.load(Ordering::Relaxed) > 0);
}

#[test]
fn observers_see_every_batch_with_its_size() {
    let observer = Arc::new(RecordingObserver::new());
    let source = MemorySource::with_ids(&[&[5, 5], &[3]]);
    let loader = ids_loader(source, LoaderConfig::new()).with_observer(Arc::clone(&observer));
    let epoch = loader
        .plan_epoch(&InOrderSampler::new(4), &PlanRequest::new(0, 6))
        .unwrap();
    assert_eq!(epoch.count(), 4);
    let sizes: Vec<(u64, u64, u64)> = observer
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::BatchLoaded {
                epoch,
                batch,
                samples,
                ..
            } => Some((epoch, batch, samples)),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, vec![(6, 0, 4), (6, 1, 4), (6, 2, 4), (6, 3, 1)]);
}

#[test]
fn repeated_samples_are_delivered_each_time() {
    let source = MemorySource::with_ids(&[&[3], &[2]]);
    let order = vec![4, 0, 1, 0, 2, 4, 3];
    let plan = Plan::new(0, Shard::SINGLE, 2, order.clone(), &source).unwrap();
    let loader = ids_loader(source, LoaderConfig::new().with_workers(2));
    let batches: Vec<Vec<u64>> = loader
        .epoch(plan)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(batches.concat(), order);
}

#[test]
fn a_plan_for_another_layout_is_refused() {
    let big = MemorySource::with_ids(&[&[10, 10]]);
    let plan = InOrderSampler::new(4)
        .plan(&big, &PlanRequest::new(0, 0))
        .unwrap();
    let loader = ids_loader(MemorySource::with_ids(&[&[10]]), LoaderConfig::new());
    let error = loader.epoch(plan).unwrap_err();
    assert!(matches!(error, Error::PlanMismatch { .. }), "{error}");
    assert!(error.to_string().contains("names sample 10"), "{error}");
}

#[test]
fn a_plan_for_other_block_boundaries_of_the_same_samples_is_refused_at_once() {
    // Eight samples in blocks of 4 + 4 for the plan, 3 + 5 in the source: every sample id is
    // valid, but the plan would free or not yet read the block a sample is in. With several
    // workers it could succeed or fail by timing; it must fail before any read, every time.
    let plan = InOrderSampler::new(2)
        .plan(&MemorySource::with_ids(&[&[4, 4]]), &PlanRequest::new(0, 0))
        .unwrap();
    let loader = ids_loader(
        MemorySource::with_ids(&[&[3, 5]]),
        LoaderConfig::new().with_workers(2),
    );
    let error = loader.epoch(plan).unwrap_err();
    assert!(matches!(error, Error::PlanMismatch { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("plan position 3 takes sample 3, which the source holds in block 1"),
        "{error}"
    );
}

#[test]
fn the_residency_follows_the_plan() {
    let source = MemorySource::with_ids(&[&[100; 10]]);
    let config = LoaderConfig::new()
        .with_workers(2)
        .with_prefetch_batches(2)
        .with_read_ahead_blocks(2);
    let loader = ids_loader(source, config);
    let sequential = InOrderSampler::new(10)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let bound = loader.residency(&sequential).unwrap();
    assert_eq!(bound.peak_window_blocks, 2);
    assert_eq!(bound.max_samples(), 200 + 200 + 20);
    let scrambled = scrambled_plan(loader.source().as_ref(), 10, 0);
    assert_eq!(loader.residency(&scrambled).unwrap().peak_window_blocks, 10);
    // A plan of a larger source is refused, as an epoch of it is, not a panic.
    let larger = MemorySource::with_ids(&[&[100; 12]]);
    let foreign = InOrderSampler::new(10)
        .plan(&larger, &PlanRequest::new(0, 0))
        .unwrap();
    let error = loader.residency(&foreign).unwrap_err();
    assert!(matches!(error, Error::PlanMismatch { .. }), "{error}");
    // Blocks that agree but for a last sample the source lacks: refused too.
    let short = ids_loader(MemorySource::with_ids(&[&[4, 4]]), LoaderConfig::new());
    let longer = InOrderSampler::new(2)
        .plan(&MemorySource::with_ids(&[&[4, 5]]), &PlanRequest::new(0, 0))
        .unwrap();
    let error = short.residency(&longer).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("names sample 8, but the source has 8"),
        "{error}"
    );
}

/// Live `Tracked` samples, and the most there ever were at once.
#[derive(Debug, Default)]
struct Census {
    live: AtomicU64,
    peak: AtomicU64,
}

/// A sample that counts itself in a census while it exists.
#[derive(Debug)]
struct Tracked {
    id: SampleId,
    census: Arc<Census>,
}

impl Tracked {
    fn new(id: SampleId, census: &Arc<Census>) -> Self {
        let live = census.live.fetch_add(1, Ordering::SeqCst) + 1;
        census.peak.fetch_max(live, Ordering::SeqCst);
        Self {
            id,
            census: Arc::clone(census),
        }
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Self::new(self.id, &self.census)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.census.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Ids as `Tracked` samples, created when a block is read.
struct TrackedSource {
    ids: MemorySource<SampleId>,
    census: Arc<Census>,
}

impl BlockLayout for TrackedSource {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.ids.blocks()
    }
    fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
        self.ids.fingerprint()
    }
    fn num_files(&self) -> usize {
        self.ids.num_files()
    }
}

impl BlockSource for TrackedSource {
    type Item = Tracked;
    type Error = kiln_ml_testkit::MemorySourceError;

    fn read_block(&self, block: BlockIndex) -> std::result::Result<Vec<Tracked>, Self::Error> {
        let ids = self.ids.read_block(block)?;
        Ok(ids
            .into_iter()
            .map(|id| Tracked::new(id, &self.census))
            .collect())
    }
}

#[test]
fn live_samples_stay_within_the_residency_bound() {
    // 40 blocks of 50 samples, read block after block, counted while they exist: a loader that
    // read ahead without limit, or kept samples past their use, would hold up to all 2,000.
    let census = Arc::new(Census::default());
    let source = TrackedSource {
        ids: MemorySource::with_ids(&[&[50; 40]]),
        census: Arc::clone(&census),
    };
    let config = LoaderConfig::new()
        .with_workers(2)
        .with_prefetch_batches(2)
        .with_read_ahead_blocks(2);
    let ids = collate_fn(|batch: Vec<Tracked>| batch.iter().map(|t| t.id).collect::<Vec<_>>());
    let loader = Loader::new(source, ids, config).unwrap();
    let plan = BlocksReversed { batch_size: 10 }
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let bound = loader.residency(&plan).unwrap().max_samples();
    assert!(bound < 500, "the bound itself must be tight here: {bound}");
    let mut delivered = Vec::new();
    for batch in loader.epoch(plan.clone()).unwrap() {
        delivered.extend(batch.unwrap());
        // A slow consumer: the loader runs as far ahead as it is allowed to.
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(delivered, plan.order());
    let peak = census.peak.load(Ordering::SeqCst);
    assert!(
        peak <= bound,
        "{peak} samples were live at once, the bound is {bound}"
    );
    assert_eq!(
        census.live.load(Ordering::SeqCst),
        0,
        "every sample was dropped"
    );
}

#[derive(Clone)]
struct XBatcher;

impl<B: Backend> Batcher<B, (i64, f32), Tensor<B, 1>> for XBatcher {
    fn batch(&self, items: Vec<(i64, f32)>, device: &B::Device) -> Tensor<B, 1> {
        let xs: Vec<f32> = items.iter().map(|&(_, x)| x).collect();
        let len = xs.len();
        Tensor::from_data(TensorData::new(xs, [len]), device)
    }
}

/// Workers build device tensors with a Burn batcher, in plan order.
fn burn_batcher_collates_on<B: Backend>(device: B::Device) {
    let data = tempfile::tempdir().unwrap();
    write_dataset(data.path(), &[9, 5], 4);
    let source = ParquetSource::builder()
        .dir(data.path())
        .build_with(pair_decoder())
        .unwrap();
    let collate = BurnCollate::<B, _, Tensor<B, 1>>::new(XBatcher, device.clone());
    let loader = Loader::new(source, collate, LoaderConfig::new().with_workers(2)).unwrap();
    let plan = InOrderSampler::new(6)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .unwrap();
    let tensors: Vec<Tensor<B, 1>> = loader
        .epoch(plan)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tensors.len(), 3);
    let values: Vec<f32> = tensors
        .into_iter()
        .flat_map(|tensor| tensor.into_data().to_vec::<f32>().unwrap())
        .collect();
    let expected: Vec<f32> = (0..14).map(|id| id as f32 / 2.0).collect();
    assert_eq!(values, expected);
}

#[test]
fn any_burn_batcher_collates() {
    burn_batcher_collates_on::<Flex>(Default::default());
}

/// The GPU-style tier: the same on Burn's wgpu backend (a Vulkan adapter, lavapipe in CI).
#[cfg(feature = "wgpu")]
#[test]
fn any_burn_batcher_collates_on_wgpu() {
    if let Some(device) = kiln_ml_testkit::wgpu_device() {
        burn_batcher_collates_on::<burn::backend::Wgpu>(device);
    }
}

/// Batches whose reads the consuming thread queues without waiting, as a training step does,
/// keep their own values: Burn 0.21's fusion frees a tensor made on another thread too early
/// (the worker's next upload takes its memory), so with fusion `TensorCreation::Auto` runs the
/// batcher on the consuming thread. With `OnWorkers` lavapipe read a third of such f16 batches
/// wrong (docs/performance.md, "f16-mixed through wgpu: batches from other threads").
#[cfg(feature = "wgpu")]
#[test]
fn lazily_consumed_burn_batches_keep_their_values_on_wgpu() {
    use burn::tensor::FloatDType;
    use kiln_ml_data::TensorCreation;
    type B = burn::backend::Wgpu;
    let Some(device) = kiln_ml_testkit::wgpu_device() else {
        return;
    };
    assert!(TensorCreation::Auto.on_consumer::<B>(&device));
    let data = tempfile::tempdir().unwrap();
    write_dataset(data.path(), &[1500, 1500], 100);
    for creation in [TensorCreation::Auto, TensorCreation::OnConsumer] {
        let source = ParquetSource::builder()
            .dir(data.path())
            .build_with(pair_decoder())
            .unwrap();
        let collate = BurnCollate::<B, _, Tensor<B, 1>>::new(XBatcher, device.clone())
            .with_tensor_creation(creation);
        let loader = Loader::new(source, collate, LoaderConfig::new().with_workers(2)).unwrap();
        let plan = InOrderSampler::new(25)
            .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
            .unwrap();
        // Queue f16 work on every batch and read the results only at the end.
        let results: Vec<Tensor<B, 1>> = loader
            .epoch(plan)
            .unwrap()
            .map(|batch| {
                batch
                    .unwrap()
                    .cast(FloatDType::F16)
                    .mul_scalar(2.0)
                    .cast(FloatDType::F32)
            })
            .collect();
        let wrong: Vec<usize> = results
            .into_iter()
            .enumerate()
            .filter(|(index, result)| {
                let values = result.to_data().to_vec::<f32>().unwrap();
                // x = id / 2, so 2x is the id, to within f16's rounding (1 above 2048).
                values
                    .iter()
                    .enumerate()
                    .any(|(row, got)| (got - (index * 25 + row) as f32).abs() > 1.0)
            })
            .map(|(index, _)| index)
            .collect();
        assert!(
            wrong.is_empty(),
            "{creation:?}: {} of 120 batches read other values: {wrong:?}",
            wrong.len()
        );
    }
}

/// Builds `[rows, 1]` tensors of `x` straight from a batch's columns, and keeps its ids.
struct XColumns;

impl<B: Backend> ColumnBatcher<B, (Vec<i64>, Tensor<B, 2>)> for XColumns {
    fn batch(&self, columns: RecordBatch, device: &B::Device) -> (Vec<i64>, Tensor<B, 2>) {
        let rows = columns.num_rows();
        let x = float_matrix(&columns, &["x"]).unwrap();
        let ids = int_vector(&columns, "id").unwrap();
        (
            ids,
            Tensor::from_data(TensorData::new(x, [rows, 1]), device),
        )
    }
}

/// Columnar batches hold exactly the samples, in exactly the order, that per-sample batches
/// hold, for a scrambled plan whose batches straddle row groups and files, on any worker count.
fn columnar_batches_match_per_sample_ones_on<B: Backend>(device: B::Device) {
    let data = tempfile::tempdir().unwrap();
    write_dataset(data.path(), &[9, 5, 13], 4);
    let per_sample = ParquetSource::builder()
        .dir(data.path())
        .build_with(pair_decoder())
        .unwrap();
    let pairs = collate_fn(|items: Vec<(i64, f32)>| items);
    let loader = Loader::new(per_sample, pairs, LoaderConfig::new().with_workers(2)).unwrap();
    let plan = scrambled_plan(loader.source().as_ref(), 5, 3);
    let expected: Vec<Vec<(i64, f32)>> = loader
        .epoch(plan.clone())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for workers in [1, 3] {
        let source = ParquetSource::builder().dir(data.path()).build().unwrap();
        let collate = BurnColumnar::<B, _, _>::new(XColumns, device.clone());
        let config = LoaderConfig::new().with_workers(workers);
        let loader = Loader::new(source, collate, config).unwrap();
        let batches: Vec<Vec<(i64, f32)>> = loader
            .epoch(plan.clone())
            .unwrap()
            .map(|batch| {
                let (ids, x) = batch.unwrap();
                assert_eq!(x.dims(), [ids.len(), 1]);
                ids.into_iter()
                    .zip(x.into_data().to_vec::<f32>().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(batches, expected, "{workers} workers");
    }
}

#[test]
fn columnar_batches_match_per_sample_ones() {
    columnar_batches_match_per_sample_ones_on::<Flex>(Default::default());
}

/// The GPU-style tier: the same on Burn's wgpu backend.
#[cfg(feature = "wgpu")]
#[test]
fn columnar_batches_match_per_sample_ones_on_wgpu() {
    if let Some(device) = kiln_ml_testkit::wgpu_device() {
        columnar_batches_match_per_sample_ones_on::<burn::backend::Wgpu>(device);
    }
}

#[test]
fn an_empty_plan_is_an_empty_epoch() {
    let source = MemorySource::with_ids(&[&[3]]);
    let plan = Plan::new(0, Shard::SINGLE, 2, Vec::new(), &source).unwrap();
    let loader = ids_loader(source, LoaderConfig::new());
    let mut epoch = loader.epoch(plan).unwrap();
    assert_eq!(epoch.batches(), 0);
    assert!(epoch.next().is_none());
    assert_eq!(epoch.position(), Position::start_of(1));
}

#[test]
fn plans_built_directly_on_a_layout_work() {
    let source = MemorySource::with_ids(&[&[2, 2]]);
    let layout = Layout::from_layout(&source).unwrap();
    let plan = Plan::new(0, Shard::SINGLE, 2, vec![3, 2, 1, 0], &layout).unwrap();
    let loader = ids_loader(source, LoaderConfig::new());
    let batches: Vec<Vec<u64>> = loader
        .epoch(plan)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(batches, vec![vec![3, 2], vec![1, 0]]);
}

#[test]
fn chained_epochs_match_separate_ones() {
    let source = MemorySource::with_ids(&[&[7, 5], &[9, 3]]);
    let config = LoaderConfig::new().with_workers(2).with_prefetch_batches(2);
    let loader = ids_loader(source, config);
    let plans: Vec<Plan> = (0..3)
        .map(|epoch| scrambled_plan(loader.source().as_ref(), 4, epoch))
        .collect();
    let separate: Vec<Vec<Vec<u64>>> = plans
        .iter()
        .map(|plan| {
            loader
                .epoch(plan.clone())
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        })
        .collect();
    let mut chained = Vec::new();
    let mut epoch = loader.epoch(plans[0].clone()).unwrap();
    for next in 1..=plans.len() {
        if let Some(plan) = plans.get(next) {
            epoch.prefetch_next(plan.clone());
        }
        chained.push(epoch.by_ref().collect::<Result<Vec<_>, _>>().unwrap());
        match epoch.into_next() {
            Some(started) => epoch = started.unwrap(),
            None => {
                assert_eq!(next, plans.len(), "only the last epoch has no successor");
                break;
            }
        }
    }
    assert_eq!(chained, separate);
}

/// A plan announced on its own names no stream: the next epoch reports no data key (it used
/// to report the current one, which a plan of another seed or sampler would have made wrong).
/// Planned through the loader, it reports its own stream's key.
#[test]
fn a_next_epoch_reports_the_key_of_the_stream_that_planned_it() {
    let loader = ids_loader(MemorySource::with_ids(&[&[10]]), LoaderConfig::new());
    let sampler = InOrderSampler::new(4);
    let (first, other_seed) = (PlanRequest::new(0, 0), PlanRequest::new(7, 1));
    let mut epoch = loader.plan_epoch(&sampler, &first).unwrap();
    assert_eq!(epoch.data_key(), Some(loader.data_key(&sampler, &first)));
    let plan = sampler.plan(loader.source().as_ref(), &other_seed).unwrap();
    epoch.prefetch_next(plan);
    epoch.by_ref().for_each(drop);
    let next = epoch.into_next().unwrap().unwrap();
    assert_eq!(next.data_key(), None);

    let mut epoch = loader.plan_epoch(&sampler, &first).unwrap();
    loader.plan_next(&mut epoch, &sampler, &other_seed).unwrap();
    epoch.by_ref().for_each(drop);
    let next = epoch.into_next().unwrap().unwrap();
    let key = loader.data_key(&sampler, &other_seed);
    assert_eq!(next.data_key(), Some(key));
    assert_ne!(
        Some(key),
        Some(loader.data_key(&sampler, &first)),
        "seeds differ"
    );
}

#[test]
fn a_bad_next_plan_is_reported_when_taken() {
    let big = MemorySource::with_ids(&[&[10, 10]]);
    let foreign = InOrderSampler::new(4)
        .plan(&big, &PlanRequest::new(0, 1))
        .unwrap();
    let loader = ids_loader(MemorySource::with_ids(&[&[10]]), LoaderConfig::new());
    let mut epoch = loader
        .plan_epoch(&InOrderSampler::new(4), &PlanRequest::new(0, 0))
        .unwrap();
    epoch.prefetch_next(foreign);
    assert_eq!(epoch.by_ref().count(), 3);
    let error = epoch.into_next().unwrap().unwrap_err();
    assert!(matches!(error, Error::PlanMismatch { .. }), "{error}");
}

thread_local! {
    /// Set on the thread whose layout lookups [`LookupCost`] slows.
    static SLOW_LOOKUPS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long a slowed layout lookup takes.
const LOOKUP_COST: Duration = Duration::from_millis(300);

/// Sleeps in `blocks()` on a thread that set [`SLOW_LOOKUPS`]: what a large plan's launch costs
/// the consumer thread (its checks walk the layout), made visible.
struct LookupCost {
    inner: MemorySource<u64>,
}

impl BlockLayout for LookupCost {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        if SLOW_LOOKUPS.with(std::cell::Cell::get) {
            std::thread::sleep(LOOKUP_COST);
        }
        self.inner.blocks()
    }
    fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
        self.inner.fingerprint()
    }
}

impl BlockSource for LookupCost {
    type Item = u64;
    type Error = kiln_ml_testkit::MemorySourceError;
    fn read_block(&self, block: BlockIndex) -> std::result::Result<Vec<u64>, Self::Error> {
        self.inner.read_block(block)
    }
}

/// Launching an announced next epoch runs on the consumer's thread: its time is counted in the
/// wait of the batch that launched it, so the reported data wait is all the time spent in the
/// loader.
#[test]
fn launching_the_next_epoch_counts_as_data_wait() {
    let observer = Arc::new(RecordingObserver::new());
    // 16 blocks of 2 rows, batches of 4, one batch prefetched and no block read ahead: the
    // reads cannot all be dispatched before batches are taken, so the next epoch launches
    // inside `next`, whatever the threads' timing.
    let source = LookupCost {
        inner: MemorySource::with_ids(&[&[2; 16]]),
    };
    let config = LoaderConfig::new()
        .with_prefetch_batches(1)
        .with_read_ahead_blocks(0);
    let loader = Loader::new(source, NoCollate, config)
        .unwrap()
        .with_observer(Arc::clone(&observer));
    let sampler = InOrderSampler::new(4);
    let mut epoch = loader
        .plan_epoch(&sampler, &PlanRequest::new(0, 0))
        .unwrap();
    let next = sampler
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 1))
        .unwrap();
    SLOW_LOOKUPS.with(|slow| slow.set(true));
    epoch.prefetch_next(next);
    assert!(!epoch.next_started(), "launched before any batch was taken");
    let batches = epoch.by_ref().count();
    SLOW_LOOKUPS.with(|slow| slow.set(false));
    assert_eq!(batches, 8);
    let waited: Duration = observer
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::BatchLoaded { epoch: 0, wait, .. } => Some(wait),
            _ => None,
        })
        .sum();
    assert!(
        waited >= LOOKUP_COST,
        "the launch's {LOOKUP_COST:?} is not in {waited:?}"
    );
    assert!(epoch.into_next().unwrap().is_ok());
}
