//! Verified cache reads against plain page-cache reads of the same bytes, per segment size and
//! read strategy, and the checksum costs behind the segment format.
//!
//! Run: `cargo bench -p kiln-ml-cache --bench segment_read` (add `-- 256KiB`, `-- 1MiB`, `-- 2MiB`,
//! `-- 4MiB` or `-- checksum` to pick a group). Each size group reads 128 MiB of segments that
//! sit in the page cache of the temporary directory's file system; compare the rows of one group
//! with each other, as ratios:
//!
//! - `page_cache_read`: `std::fs::read` of every segment file, no verification (the baseline).
//! - `page_cache_mmap`: map every segment file and sum its bytes as `u64`s, no verification. It
//!   pays the same per-file mapping cost as `cache_get/mmap`, so it is the baseline for that row,
//!   not a bound on raw memory bandwidth.
//! - `cache_get/read`: `DiskCache::get`, reading every segment into memory.
//! - `cache_get/mmap`: `DiskCache::get`, memory-mapping every segment.
//! - `cache_get/default`: `DiskCache::get` with the default threshold.
//!
//! The `checksum` group hashes one 256 KiB payload whole, with both XXH3 implementations the
//! format uses: twox-hash (AVX2 chosen at run time, used by portable builds) and xxhash-rust
//! (SIMD chosen at compile time, used by builds that target AVX-512); and as 248-byte records
//! (the size of the block_shuffle example's samples) with twox-hash: the two ways a segment
//! could be verified.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_ml_cache::{DEFAULT_MMAP_THRESHOLD, DiskCache, SegmentBuilder, SegmentKey};
use kiln_ml_core::Fingerprint;
use twox_hash::XxHash3_64;

/// Bytes of segments per size group: well past the L3 caches of common servers.
const GROUP_BYTES: usize = 128 << 20;
/// The block_shuffle example's encoded graph, in bytes.
const RECORD_BYTES: usize = 248;

fn key(block: u32) -> SegmentKey {
    SegmentKey {
        layout: Fingerprint::of_bytes(b"segment_read bench"),
        block,
        transform: Fingerprint::of_bytes(b"transform"),
        codec: Fingerprint::of_bytes(b"codec"),
    }
}

/// Deterministic bytes that do not compress or repeat.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Writes about `GROUP_BYTES` of segments of just over `segment_bytes` each; their keys and
/// paths.
fn write_segments(cache: &DiskCache, segment_bytes: usize) -> Vec<(SegmentKey, PathBuf)> {
    // 104 header bytes, then 24 index bytes and 248 payload bytes per record: just above the
    // named size, so the 2 MiB group sits at the default mmap threshold.
    let records = segment_bytes.div_ceil(RECORD_BYTES + 24);
    let payload = noise(segment_bytes as u64, records * RECORD_BYTES);
    (0..(GROUP_BYTES / segment_bytes) as u32)
        .map(|block| {
            let mut builder = SegmentBuilder::new(key(block), records);
            for record in payload.chunks(RECORD_BYTES) {
                builder
                    .push(|out| {
                        out.extend_from_slice(record);
                        Ok::<_, ()>(())
                    })
                    .expect("appending bytes cannot fail");
            }
            let bytes = builder.finish().expect("every record was pushed");
            cache
                .put(&key(block), &bytes)
                .expect("the bench writes its segments");
            (key(block), cache.segment_path(&key(block)))
        })
        .collect()
}

/// Maps `path` and sums its whole 8-byte words: every byte brought in through the mapping.
fn mapped_sum(path: &std::path::Path) -> u64 {
    let file = std::fs::File::open(path).expect("the segment is there");
    // SAFETY: the bench's own segment files, which nothing modifies while they are mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.expect("the segment maps");
    map.chunks_exact(8)
        .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        .fold(0, u64::wrapping_add)
}

fn read_group(c: &mut Criterion, name: &str, segment_bytes: usize) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cache = DiskCache::open(dir.path()).expect("the cache opens");
    let segments = write_segments(&cache, segment_bytes);
    let total: u64 = segments
        .iter()
        .map(|(_, path)| std::fs::metadata(path).map_or(0, |meta| meta.len()))
        .sum();
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Bytes(total))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("page_cache_read", |b| {
        b.iter(|| {
            for (_, path) in &segments {
                black_box(std::fs::read(path).expect("the segment is there"));
            }
        });
    });
    group.bench_function("page_cache_mmap", |b| {
        b.iter(|| {
            for (_, path) in &segments {
                black_box(mapped_sum(path));
            }
        });
    });
    let strategies = [
        ("cache_get/read", u64::MAX),
        ("cache_get/mmap", 0),
        ("cache_get/default", DEFAULT_MMAP_THRESHOLD),
    ];
    for (label, threshold) in strategies {
        let cache = DiskCache::open(dir.path())
            .expect("the cache reopens")
            .with_mmap_threshold(threshold);
        group.bench_function(label, |b| {
            b.iter(|| {
                for (key, _) in &segments {
                    let segment = cache.get(key).expect("verifies").expect("is there");
                    black_box(segment.byte_len());
                }
            });
        });
    }
    group.finish();
}

fn checksums(c: &mut Criterion) {
    let payload = noise(1, 256 << 10);
    let mut group = c.benchmark_group("checksum");
    group.throughput(Throughput::Bytes(payload.len() as u64));
    group.bench_function("whole_payload/twox-hash", |b| {
        b.iter(|| XxHash3_64::oneshot(black_box(&payload)));
    });
    group.bench_function("whole_payload/xxhash-rust", |b| {
        b.iter(|| xxhash_rust::xxh3::xxh3_64(black_box(&payload)));
    });
    group.bench_function("per_248_byte_record/twox-hash", |b| {
        b.iter(|| {
            black_box(&payload)
                .chunks(RECORD_BYTES)
                .fold(0, |acc, record| acc ^ XxHash3_64::oneshot(record))
        });
    });
    group.finish();
}

fn reads(c: &mut Criterion) {
    read_group(c, "256KiB", 256 << 10);
    read_group(c, "1MiB", 1 << 20);
    read_group(c, "2MiB", 2 << 20);
    read_group(c, "4MiB", 4 << 20);
}

criterion_group!(benches, reads, checksums);
criterion_main!(benches);
