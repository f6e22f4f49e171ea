//! An epoch started early with `Epoch::prefetch_next` queues work only for idle workers,
//! until the consumer reaches it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use kiln_ml_core::{BlockIndex, BlockLayout, BlockSource, PlanRequest, Sampler};
use kiln_ml_data::{Loader, LoaderConfig, NoCollate};
use kiln_ml_testkit::{InOrderSampler, MemorySource, MemorySourceError};

/// Holds every read until opened, and counts reads submitted (`prefetch`, called when the
/// loader queues a read).
struct GatedSource {
    inner: MemorySource<u64>,
    submitted: AtomicU64,
    open: Mutex<bool>,
    opened: Condvar,
}

impl GatedSource {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::SeqCst)
    }
}

impl BlockLayout for GatedSource {
    fn blocks(&self) -> &[kiln_ml_core::Block] {
        self.inner.blocks()
    }
    fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
        self.inner.fingerprint()
    }
}

impl BlockSource for GatedSource {
    type Item = u64;
    type Error = MemorySourceError;
    fn read_block(&self, block: BlockIndex) -> Result<Vec<u64>, Self::Error> {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        self.inner.read_block(block)
    }
    fn prefetch(&self, _block: BlockIndex) {
        self.submitted.fetch_add(1, Ordering::SeqCst);
    }
}

/// Opens the gate when dropped, also while a failed assertion unwinds.
struct OpenOnDrop<'a>(&'a GatedSource);

impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

#[test]
fn a_prefetched_epoch_waits_for_idle_workers_then_delivers_everything() {
    let blocks = 6;
    let source = GatedSource {
        inner: MemorySource::with_ids(&[&[4; 6]]),
        submitted: AtomicU64::new(0),
        open: Mutex::new(false),
        opened: Condvar::new(),
    };
    let config = LoaderConfig::new()
        .with_workers(1)
        .with_prefetch_batches(64);
    let loader = Loader::new(source, NoCollate, config).unwrap();
    let sampler = InOrderSampler::new(4);
    let plan = |epoch| {
        sampler
            .plan(loader.source().as_ref(), &PlanRequest::new(0, epoch))
            .unwrap()
    };
    let mut first = loader.epoch(plan(0)).unwrap();
    // Whatever fails below, the reads are let through, so the epochs can stop.
    let _open_on_exit = OpenOnDrop(loader.source().as_ref());
    // The first epoch queues all its reads at once; its one worker waits in the first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while loader.source().submitted() < blocks && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(loader.source().submitted(), blocks);
    // `prefetch` runs just before each read is queued, and the first epoch marks its reads
    // dispatched just after the last: until then the next epoch waits (and the check below
    // would test nothing), so it is announced again until it has started.
    first.prefetch_next(plan(1));
    while !first.next_started() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        first.prefetch_next(plan(1));
    }
    assert!(
        first.next_started(),
        "the next epoch had not started 10 s after the first queued all its reads"
    );
    // The next epoch has started, but the worker has the first epoch's reads queued: it
    // queues none of its own.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        loader.source().submitted(),
        blocks,
        "the next epoch queued reads while the worker had the first epoch's queued"
    );

    loader.source().open();
    let batches: Vec<Vec<u64>> = first.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.concat(), (0..24).collect::<Vec<_>>());
    let next = first.into_next().unwrap().unwrap();
    let batches: Vec<Vec<u64>> = next.collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.concat(), (0..24).collect::<Vec<_>>());
    assert_eq!(loader.source().submitted(), 2 * blocks);
}
