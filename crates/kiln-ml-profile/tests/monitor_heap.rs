//! `PeakAlloc` installed as this test binary's global allocator, read through a `HeapProbe`:
//! how a CPU backend gets a "device memory" figure. One test only, so no other test's
//! allocations run beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_ml_profile::{Clock, DeviceMonitor, HeapProbe, MemoryProbe, PeakAlloc};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc::new();

const MIB: u64 = 1 << 20;

#[test]
fn the_heap_probe_sees_allocations_come_and_go() {
    let probe = HeapProbe::new(&ALLOC);
    let before = probe.read().expect("the heap always reads");
    probe.reset_peak();

    let buffer = vec![1u8; 64 << 20];
    let during = probe.read().expect("reads");
    assert!(during.in_use_bytes >= before.in_use_bytes + 64 * MIB);
    assert_eq!(during.reserved_bytes, during.in_use_bytes);
    assert!(during.total_bytes.is_some_and(|total| total > 64 * MIB));
    drop(buffer);

    let after = probe.read().expect("reads");
    assert!(after.in_use_bytes < during.in_use_bytes - 32 * MIB);
    assert!(
        after
            .peak_bytes
            .is_some_and(|peak| peak >= during.in_use_bytes),
        "the peak outlives the buffer"
    );

    // The monitor samples it like any pool.
    let monitor = DeviceMonitor::builder(Clock::start())
        .interval(Duration::from_millis(20))
        .nvml(false)
        .host(false)
        .memory_probe(Arc::new(probe))
        .start()
        .expect("starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while monitor.sample_count() < 3 {
        assert!(Instant::now() < deadline, "the monitor stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let record = monitor.stop();
    assert_eq!(record.sources[0].name, "heap");
    assert!(
        record
            .samples
            .iter()
            .all(|s| s.pool_in_use_bytes.is_some_and(|bytes| bytes > 0))
    );
}
