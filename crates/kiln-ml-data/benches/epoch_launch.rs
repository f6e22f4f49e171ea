//! Starting an epoch: what `Loader::epoch` costs before the first read, for an in-order plan of
//! 10.24M samples in 10,000 blocks of 1,024 (the plan's checks against the source, the
//! schedule, the coordinator's thread). The epoch is dropped untimed.
//!
//! Run: `cargo bench -p kiln-ml-data --bench epoch_launch`.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_ml_core::{PlanRequest, Sampler};
use kiln_ml_data::{Loader, LoaderConfig, NoCollate};
use kiln_ml_testkit::{InOrderSampler, MemorySource};

fn epoch_launch(c: &mut Criterion) {
    let blocks = vec![1024u64; 10_000];
    let loader = Loader::new(
        MemorySource::with_ids(&[&blocks]),
        NoCollate,
        LoaderConfig::new().with_workers(1),
    )
    .expect("a valid loader");
    let plan = InOrderSampler::new(1024)
        .plan(loader.source().as_ref(), &PlanRequest::new(0, 0))
        .expect("a plan over the source");
    let mut group = c.benchmark_group("epoch_launch");
    group.sample_size(20);
    group.bench_function("10.24M samples in order", |b| {
        b.iter_custom(|iterations| {
            let mut spent = Duration::ZERO;
            for _ in 0..iterations {
                let plan = plan.clone();
                let started = Instant::now();
                let epoch = loader.epoch(plan).expect("the plan fits the source");
                spent += started.elapsed();
                drop(epoch);
            }
            spent
        });
    });
    group.finish();
}

criterion_group!(benches, epoch_launch);
criterion_main!(benches);
