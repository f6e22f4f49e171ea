//! Plan building: 900K samples (the 660-file case) and 100M samples, per sampler; the block
//! shuffle over a lopsided layout (one block as large as all the others together) beside a
//! balanced one of the same size; and placing every sample of a 900K plan in its block
//! (`BlockFinder::place`, what a loader does for each batch), in order and block-shuffled.
//!
//! Run: `cargo bench -p kiln-ml-sampler --bench plan_build` (add `-- 900k`, `-- 100m`,
//! `-- lopsided` or `-- place` to pick a group). Before the timings, each case prints its plan's heap bytes per sample and the
//! process's peak resident memory, which criterion does not report.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use kiln_ml_core::{BlockFinder, BlockLayout, Fingerprint, Layout, PlanRequest, Sampler};
use kiln_ml_sampler::{BlockShuffleConfig, BlockShuffleSampler, RandomSampler, SequentialSampler};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// `samples` rows in files of ~1,364 rows on average (log-uniform over a 4.5x range, as in
/// the shuffle_quality example), cut into row groups of at most 1,024 rows.
fn layout(samples: u64) -> Layout {
    let files = (samples / 1364).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let weights: Vec<f64> = (0..files)
        .map(|_| (1.5 * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|w| (w / total * samples as f64) as u64)
        .collect();
    let short = samples - sizes.iter().sum::<u64>();
    for size in sizes.iter_mut().take(short as usize) {
        *size += 1;
    }
    let mut builder = Layout::builder();
    for (file, rows) in sizes.into_iter().enumerate() {
        let groups = rows.div_ceil(1024).max(1);
        let row_groups: Vec<u64> = (0..groups)
            .map(|index| rows / groups + u64::from(index < rows % groups))
            .collect();
        builder.add_file(
            Fingerprint::builder().u64(file as u64).finish(),
            &row_groups,
        );
    }
    builder.build().expect("generated layouts are valid")
}

/// Peak resident memory of this process so far, in bytes (Linux; 0 elsewhere).
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

fn samplers() -> Vec<(&'static str, Box<dyn Sampler>)> {
    vec![
        ("sequential", Box::new(SequentialSampler::default())),
        (
            "file_shuffle",
            Box::new(
                BlockShuffleConfig::block_order_only()
                    .init()
                    .expect("valid"),
            ),
        ),
        ("block_shuffle", Box::new(BlockShuffleSampler::default())),
        ("random", Box::new(RandomSampler::default())),
    ]
}

/// Whether criterion's name filter (the first positional argument) selects any case of the
/// group: building a 100M-sample layout only to skip it would take seconds and gigabytes.
fn selected(group: &str) -> bool {
    let Some(filter) = std::env::args().skip(1).find(|arg| !arg.starts_with('-')) else {
        return true;
    };
    samplers()
        .iter()
        .any(|(sampler, _)| format!("{group}/{sampler}").contains(&filter))
}

fn bench_group(c: &mut Criterion, name: &str, samples: u64, sample_size: usize, seconds: u64) {
    if !selected(name) {
        return;
    }
    let layout = layout(samples);
    let request = PlanRequest::new(42, 0);
    let mut group = c.benchmark_group(name);
    group
        .sample_size(sample_size)
        .measurement_time(Duration::from_secs(seconds))
        // Every sample runs the same number of builds: 10 samples of one build each at 100M
        // rather than criterion's 1 + 2 + ... + 10.
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(samples));
    for (sampler_name, sampler) in samplers() {
        let plan = sampler.plan(&layout, &request).expect("plannable");
        eprintln!(
            "{name}/{sampler_name}: {} samples, {} blocks, plan {:.2} bytes/sample, peak RSS so far {:.0} MiB",
            layout.num_samples(),
            layout.num_blocks(),
            plan.heap_bytes() as f64 / samples as f64,
            peak_rss_bytes() as f64 / (1 << 20) as f64
        );
        drop(plan);
        group.bench_function(sampler_name, |b| {
            b.iter(|| black_box(sampler.plan(&layout, &request).expect("plannable")))
        });
    }
    group.finish();
    eprintln!(
        "{name}: peak RSS of the process after the group {:.0} MiB",
        peak_rss_bytes() as f64 / (1 << 20) as f64
    );
}

fn plan_900k(c: &mut Criterion) {
    bench_group(c, "plan_900k", 900_000, 20, 10);
}

fn plan_100m(c: &mut Criterion) {
    bench_group(c, "plan_100m", 100_000_000, 10, 30);
}

/// 999 files of one 1,000-row block and one file of a single 999,000-row block: the big block
/// is half the data, so it dwarfs every other lane of the block shuffle's interleave.
fn lopsided_layout() -> Layout {
    let mut builder = Layout::builder();
    for file in 0..999u64 {
        builder.add_file(Fingerprint::builder().u64(file).finish(), &[1_000]);
    }
    builder.add_file(Fingerprint::builder().u64(999).finish(), &[999_000]);
    builder.build().expect("a valid layout")
}

/// The block shuffle (stratified, as by default, and not) over the lopsided layout and over a
/// balanced layout of as many samples: per sample, the two should cost about the same.
fn plan_lopsided(c: &mut Criterion) {
    let layouts = [
        ("balanced", layout(1_998_000)),
        ("lopsided", lopsided_layout()),
    ];
    let request = PlanRequest::new(42, 0);
    let mut group = c.benchmark_group("plan_lopsided");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(1_998_000));
    for (layout_name, layout) in &layouts {
        assert_eq!(layout.num_samples(), 1_998_000);
        for stratified in [true, false] {
            let sampler = BlockShuffleConfig::default()
                .with_stratified(stratified)
                .init()
                .expect("valid");
            let name = format!(
                "{layout_name}/{}",
                if stratified {
                    "stratified"
                } else {
                    "shared_queue"
                }
            );
            group.bench_function(name, |b| {
                b.iter(|| black_box(sampler.plan(layout, &request).expect("plannable")))
            });
        }
    }
    group.finish();
}

/// Every sample of a 900K plan placed in its block and row, in the plan's order: a shuffled
/// plan's lookups jump between blocks, a sequential one's walk them.
fn place_900k(c: &mut Criterion) {
    let layout = layout(900_000);
    let finder = BlockFinder::new(layout.blocks());
    let request = PlanRequest::new(42, 0);
    let mut group = c.benchmark_group("place_900k");
    group.throughput(Throughput::Elements(layout.num_samples()));
    let plans: [(&str, Box<dyn Sampler>); 2] = [
        ("sequential", Box::new(SequentialSampler::default())),
        ("block_shuffle", Box::new(BlockShuffleSampler::default())),
    ];
    for (name, sampler) in plans {
        let plan = sampler.plan(&layout, &request).expect("plannable");
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut rows = 0u64;
                for &sample in plan.order() {
                    let (block, row) = finder.place(sample).expect("in the layout");
                    rows = rows.wrapping_add(u64::from(block) ^ row);
                }
                black_box(rows)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, plan_900k, plan_100m, plan_lopsided, place_900k);
criterion_main!(benches);
