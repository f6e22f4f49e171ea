//! Pinned plans: a digest of every plan (order and block schedule) and every resumed plan over
//! a grid of layouts, seeds, epochs, shards, batch sizes and remainder policies, per sampler.
//!
//! If a digest changes, runs resumed from an older release would not continue where they
//! stopped. Change one only with a deliberate bump of the RNG key tag.

use kiln_ml_core::{Fingerprint, Layout, Plan, PlanRequest, Result, Sampler, Shard};
use kiln_ml_sampler::{
    BlockShuffleConfig, RandomSampler, RemainderPolicy, SequentialSampler, Sharding,
};

/// FNV-1a, 64 bits: stable across platforms and releases, unlike `DefaultHasher`.
struct Digest(u64);

impl Digest {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn u64(&mut self, value: u64) {
        for byte in value.to_le_bytes() {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn text(&mut self, text: &str) {
        for byte in text.bytes() {
            self.u64(u64::from(byte));
        }
    }

    fn plan(&mut self, plan: &Result<Plan>) {
        match plan {
            Ok(plan) => {
                self.u64(plan.epoch());
                self.u64(plan.batch_size());
                self.u64(plan.already_consumed());
                self.u64(plan.len() as u64);
                plan.order().iter().for_each(|&id| self.u64(id));
                for used in plan.schedule() {
                    self.u64(u64::from(used.block));
                    self.u64(used.first_use);
                    self.u64(used.last_use);
                }
            }
            Err(error) => self.text(&error.to_string()),
        }
    }
}

fn layout(files: &[&[u64]]) -> Layout {
    let mut builder = Layout::builder();
    for (index, rows) in files.iter().enumerate() {
        builder.add_file(Fingerprint::builder().u64(index as u64).finish(), rows);
    }
    builder.build().unwrap()
}

/// Mixed files with empty blocks, uneven files, one giant block among tiny ones.
fn layouts() -> Vec<Layout> {
    let uneven: Vec<[u64; 2]> = (0..40u64)
        .map(|file| [30 + (file * 17) % 50, if file % 3 == 0 { 25 } else { 0 }])
        .collect();
    let uneven: Vec<&[u64]> = uneven.iter().map(|blocks| &blocks[..]).collect();
    vec![
        layout(&[&[7, 0, 5], &[12], &[3, 3, 3], &[0, 9]]),
        layout(&uneven),
        layout(&[&[1], &[300], &[2]]),
    ]
}

/// The digest of every plan and resumed plan a sampler builds over the grid.
fn digest(make: &dyn Fn(Sharding) -> Box<dyn Sampler>) -> u64 {
    let mut digest = Digest::new();
    for layout in layouts() {
        for batch_size in [1, 4] {
            for remainder in [
                RemainderPolicy::Drop,
                RemainderPolicy::Pad,
                RemainderPolicy::Uneven,
            ] {
                let sampler = make(Sharding::new(batch_size, remainder));
                for (seed, epoch) in [(0, 0), (42, 0), (42, 3), (2024, 7)] {
                    for world in [1, 2, 3] {
                        for rank in 0..world {
                            let request = PlanRequest::new(seed, epoch)
                                .with_shard(Shard::new(rank, world).unwrap());
                            let plan = sampler.plan(&layout, &request);
                            digest.plan(&plan);
                            let Ok(plan) = plan else { continue };
                            // Resume two local batches in, when the plan is that long.
                            let delivered = 2 * batch_size;
                            if let Ok(position) = plan.position_after(delivered) {
                                digest.plan(&sampler.resume(&layout, &request, position));
                            }
                        }
                    }
                }
            }
        }
    }
    digest.0
}

type Make = Box<dyn Fn(Sharding) -> Box<dyn Sampler>>;

fn block_shuffle(config: BlockShuffleConfig) -> Make {
    Box::new(move |sharding| Box::new(config.with_sharding(sharding).init().unwrap()))
}

#[test]
fn plans_are_pinned_for_every_sampler_seed_epoch_and_shard() {
    let samplers: Vec<(&str, Make, u64)> = vec![
        (
            "sequential",
            Box::new(|sharding| Box::new(SequentialSampler::new(sharding))),
            0x7d1ba9348d355e0c,
        ),
        (
            "random",
            Box::new(|sharding| Box::new(RandomSampler::new(sharding))),
            0x1a28d28aec13e803,
        ),
        (
            "block_shuffle",
            block_shuffle(BlockShuffleConfig::new()),
            0x5a132e13c9687bbf,
        ),
        (
            "block_shuffle_k3_s16",
            block_shuffle(
                BlockShuffleConfig::new()
                    .with_open_blocks(3)
                    .with_buffer_samples(16),
            ),
            0x66370bb98e9f5b3c,
        ),
        (
            "block_shuffle_shared_k2",
            block_shuffle(
                BlockShuffleConfig::new()
                    .with_open_blocks(2)
                    .with_buffer_samples(0)
                    .with_stratified(false),
            ),
            0x25e0fbb98918cc85,
        ),
        (
            "block_order_only",
            block_shuffle(BlockShuffleConfig::block_order_only()),
            0xf23127ff62477fdd,
        ),
    ];
    let digests: Vec<(&str, u64)> = samplers
        .iter()
        .map(|(name, make, _)| (*name, digest(make.as_ref())))
        .collect();
    let pinned: Vec<(&str, u64)> = samplers
        .iter()
        .map(|(name, _, pinned)| (*name, *pinned))
        .collect();
    assert_eq!(digests, pinned);
}
