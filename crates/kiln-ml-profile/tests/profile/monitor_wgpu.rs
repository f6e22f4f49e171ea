//! The device monitor's memory figures on Burn's wgpu backend (with fusion) agree with the pool
//! statistics CubeCL reports on the training thread. Skipped without a Vulkan adapter, unless
//! `KILN_REQUIRE_GPU=1`.
#![cfg(feature = "wgpu")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::backend::Wgpu;
use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use cubecl::Runtime;
use kiln_ml_profile::{Clock, CubePoolProbe, DeviceMonitor, MemoryProbe, MemoryReading};

const TENSOR_BYTES: u64 = 1024 * 1024 * 4;

fn sync(device: &WgpuDevice) {
    <Wgpu as Backend>::sync(device).expect("the device syncs");
}

fn read(probe: &CubePoolProbe) -> MemoryReading {
    probe.read().expect("the wgpu pool reads")
}

#[test]
fn the_monitor_reads_the_training_threads_wgpu_pool_as_cubecl_reports_it() {
    let Some(device) = kiln_ml_testkit::wgpu_device() else {
        return;
    };
    // This test's thread is the training thread: the probe is made here.
    let probe = Arc::new(CubePoolProbe::wgpu(&device));
    let before = read(&probe);

    // A tensor created through fusion, synced: its 4 MiB are in this thread's pool.
    let ones = Tensor::<Wgpu, 2>::ones([1024, 1024], &device);
    sync(&device);
    let with_ones = read(&probe);
    assert!(
        with_ones.in_use_bytes >= before.in_use_bytes + TENSOR_BYTES,
        "{before:?} -> {with_ones:?}"
    );

    // A fused elementwise chain executed by fusion's runner thread lands in the same pool.
    let fused = ones.clone() * 2.0 + 1.0;
    sync(&device);
    let with_fused = read(&probe);
    assert!(
        with_fused.in_use_bytes >= with_ones.in_use_bytes + TENSOR_BYTES,
        "{with_ones:?} -> {with_fused:?}"
    );
    assert!(with_fused.reserved_bytes >= with_fused.in_use_bytes);

    // CubeCL's own figures on the training thread, at this quiescent point.
    let usage = WgpuRuntime::client(&device)
        .memory_usage()
        .expect("memory usage");
    assert_eq!(
        (usage.bytes_in_use, usage.bytes_reserved),
        (with_fused.in_use_bytes, with_fused.reserved_bytes)
    );

    // The monitor thread reads the same figures through the probe.
    let monitor = DeviceMonitor::builder(Clock::start())
        .interval(Duration::from_millis(20))
        .nvml(false)
        .memory_probe(probe.clone())
        .start()
        .expect("starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while monitor.sample_count() < 3 {
        assert!(Instant::now() < deadline, "the monitor stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let record = monitor.stop();
    let source = record.source("wgpu pool").expect("the probe is a source");
    assert!(source.available, "{source}");
    for sample in &record.samples {
        assert_eq!(sample.pool_in_use_bytes, Some(usage.bytes_in_use));
        assert_eq!(sample.pool_reserved_bytes, Some(usage.bytes_reserved));
    }

    // A client on another thread reads that thread's stream: not this thread's tensors. This is
    // why the probe pins the training thread's stream.
    let elsewhere = {
        let device = device.clone();
        std::thread::spawn(move || {
            WgpuRuntime::client(&device)
                .memory_usage()
                .expect("memory usage")
        })
        .join()
        .expect("the thread ends")
    };
    eprintln!(
        "in use: before {} / ones {} / fused {} / another thread's stream {}",
        before.in_use_bytes,
        with_ones.in_use_bytes,
        with_fused.in_use_bytes,
        elsewhere.bytes_in_use
    );
    assert!(
        elsewhere.bytes_in_use + TENSOR_BYTES <= usage.bytes_in_use,
        "another thread's stream holds {elsewhere} where this one holds {usage}"
    );

    // Freed tensors leave the in-use figure; the peak stays.
    drop(fused);
    drop(ones);
    sync(&device);
    let freed = read(&probe);
    assert!(
        freed.in_use_bytes + 2 * TENSOR_BYTES <= with_fused.in_use_bytes,
        "{with_fused:?} -> {freed:?}"
    );
    assert!(freed.peak_bytes >= Some(with_fused.reserved_bytes));
    probe.reset_peak();
    probe.cleanup();
    let after_reset = read(&probe);
    assert_eq!(after_reset.peak_bytes, Some(after_reset.reserved_bytes));
}
