//! The device monitor without a GPU: it runs, says why NVML is unavailable, and samples the
//! host and a memory probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kiln_ml_profile::{Action, Span};
use kiln_ml_profile::{Clock, DeviceMonitor, Error, MemoryProbe, MemoryReading};
use kiln_ml_profile::{nvml_gpus, summaries_by_phase, summarize_samples};

/// Waits (generously: this is no timing test) until `done` holds.
fn wait_until(monitor: &DeviceMonitor, done: impl Fn(&DeviceMonitor) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(monitor) {
        assert!(
            Instant::now() < deadline,
            "the monitor stalled: {monitor:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn without_a_driver_nvml_is_unavailable_with_the_reason_and_the_host_still_reads() {
    let monitor = DeviceMonitor::builder(Clock::start())
        .interval(Duration::from_millis(20))
        .start()
        .expect("the monitor starts without a GPU");
    assert!(
        monitor.latest().is_some(),
        "start waits for the first sample"
    );
    wait_until(&monitor, |m| {
        m.sample_count() >= 3
            && m.latest()
                .is_some_and(|s| s.cpu_utilization_percent.is_some())
    });
    let record = monitor.stop();

    let nvml = record.source("nvml").expect("nvml was tried");
    match nvml_gpus() {
        Err(reason) => {
            assert!(!nvml.available);
            assert_eq!(nvml.reason.as_deref(), Some(reason.as_str()));
            assert!(
                nvml.to_string().starts_with("nvml: unavailable ("),
                "{nvml}"
            );
            eprintln!("{nvml}");
            assert!(
                record
                    .samples
                    .iter()
                    .all(|s| s.gpu_utilization_percent.is_none())
            );
        }
        Ok(gpus) => assert_eq!(nvml.available, !gpus.is_empty(), "{nvml}"),
    }
    let host = record.source("host").expect("the host was read");
    assert!(host.available, "{host}");
    assert!(record.samples.len() >= 3);
    assert!(
        record
            .samples
            .iter()
            .all(|s| s.ram_total_bytes.is_some_and(|t| t > 0))
    );
    assert!(
        record
            .samples
            .iter()
            .any(|s| s.cpu_utilization_percent.is_some())
    );
    assert!(
        record.samples.windows(2).all(|w| w[0].at < w[1].at),
        "samples are stamped in order"
    );
}

#[test]
fn intervals_out_of_range_are_refused() {
    for interval in [Duration::from_millis(9), Duration::from_secs(61)] {
        let refused = DeviceMonitor::builder(Clock::start())
            .interval(interval)
            .start();
        assert!(
            matches!(refused, Err(Error::InvalidSetting { .. })),
            "{interval:?}: {refused:?}"
        );
    }
}

#[test]
fn a_long_run_keeps_at_most_max_samples_spread_over_all_of_it() {
    let monitor = DeviceMonitor::builder(Clock::start())
        .interval(Duration::from_millis(10))
        .nvml(false)
        .max_samples(4)
        .start()
        .unwrap();
    // 4 kept in 16 taken or more: the log filled and was thinned twice.
    wait_until(&monitor, |monitor| monitor.kept_every() >= 4);
    let record = monitor.stop();
    assert!(record.samples.len() <= 4, "{}", record.samples.len());
    assert!(
        record
            .samples
            .windows(2)
            .all(|pair| pair[0].at < pair[1].at)
    );
    let refused = DeviceMonitor::builder(Clock::start())
        .max_samples(1)
        .start();
    assert!(
        matches!(refused, Err(Error::InvalidSetting { setting, .. }) if setting.contains("max_samples")),
        "{refused:?}"
    );
}

/// A probe whose figure the test sets.
#[derive(Default)]
struct Settable(AtomicU64);

impl MemoryProbe for Settable {
    fn name(&self) -> &str {
        "settable"
    }
    fn read(&self) -> Result<MemoryReading, String> {
        let bytes = self.0.load(Ordering::SeqCst);
        Ok(MemoryReading {
            in_use_bytes: bytes,
            reserved_bytes: 2 * bytes,
            ..MemoryReading::default()
        })
    }
}

#[test]
fn the_memory_probe_fills_the_pool_figures_and_summaries_cover_them() {
    let probe = Arc::new(Settable(AtomicU64::new(100)));
    let clock = Clock::start();
    let monitor = DeviceMonitor::builder(clock)
        .interval(Duration::from_millis(10))
        .nvml(false)
        .host(false)
        .memory_probe(probe.clone())
        .start()
        .expect("starts");
    assert_eq!(
        monitor.clock(),
        clock,
        "the samples are stamped on the given clock"
    );
    wait_until(&monitor, |m| m.sample_count() >= 2);
    probe.0.store(300, Ordering::SeqCst);
    // Samples stamped from here on were read after the store.
    let switch = monitor.clock().now();
    wait_until(&monitor, |m| m.latest().is_some_and(|s| s.at >= switch));
    let record = monitor.stop();
    assert_eq!(record.sources.len(), 1, "nvml and host were turned off");
    assert!(record.sources[0].available);
    assert!(record.samples.iter().all(|s| s.ram_total_bytes.is_none()));

    let all = summarize_samples(&record.samples);
    let in_use = all.get("pool_in_use_bytes").expect("every sample has it");
    assert_eq!((in_use.min, in_use.max), (100.0, 300.0));
    assert_eq!(all.get("pool_reserved_bytes").map(|s| s.max), Some(600.0));

    // Two phases split at the switch; a sample stamped just before it may have read either
    // figure, so only the figures that cannot be mixed are checked.
    let end = record.samples.last().expect("samples").at + Duration::from_millis(1);
    let span = |action, start, end: Duration| Span {
        action,
        step: 0,
        start,
        duration: end - start,
        sync: None,
    };
    let spans = [
        span(Action::Step, Duration::ZERO, end),
        span(Action::Forward, Duration::ZERO, switch),
        span(Action::Backward, switch, end),
    ];
    let phases = summaries_by_phase(&record.samples, &spans);
    let forward = phases[&Action::Forward]
        .get("pool_in_use_bytes")
        .expect("had samples");
    assert_eq!(forward.min, 100.0);
    let backward = phases[&Action::Backward]
        .get("pool_in_use_bytes")
        .expect("had samples");
    assert_eq!((backward.min, backward.max), (300.0, 300.0));
    assert_eq!(
        phases.values().map(|s| s.samples).sum::<usize>(),
        record.samples.len()
    );
}

#[test]
fn dropping_a_monitor_stops_its_thread() {
    let monitor = DeviceMonitor::builder(Clock::start())
        .interval(Duration::from_secs(60))
        .nvml(false)
        .start()
        .expect("starts");
    let started = Instant::now();
    drop(monitor);
    // The thread waits on the stop channel, not in a sleep: dropping does not wait the
    // interval out (60 s here; any bound far below it makes the point).
    assert!(started.elapsed() < Duration::from_secs(30));
}
