//! Pinned plans: a digest of every plan (order and block schedule) and every resumed plan over
//! a grid of layouts, seeds, epochs, shards, batch sizes and remainder policies, per sampler.
//!
//! If a digest changes, runs resumed from an older release would not continue where they
//! stopped. Change one only deliberately: for one remainder policy's stream with a revision of
//! that policy's stream tag (`RemainderPolicy::stream_tag`, in the settings fingerprint, so
//! positions saved under the old stream are refused), across the board with a bump of the RNG
//! key tag. Pad's stream changed on 2026-11-28 (repeats drawn from the epoch's last full global
//! batch); the Drop and Uneven digests then stayed what they were.

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

/// The digest of every plan and resumed plan a sampler builds over the grid, under the
/// remainder policies `remainders`.
fn digest(make: &dyn Fn(Sharding) -> Box<dyn Sampler>, remainders: &[RemainderPolicy]) -> u64 {
    let mut digest = Digest::new();
    for layout in layouts() {
        for batch_size in [1, 4] {
            for &remainder in remainders {
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
    let samplers: Vec<(&str, Make, [u64; 2])> = vec![
        (
            "sequential",
            Box::new(|sharding| Box::new(SequentialSampler::new(sharding))),
            [0x19a1b7fe6d4110d5, 0x6e682bc2374e65e5],
        ),
        (
            "random",
            Box::new(|sharding| Box::new(RandomSampler::new(sharding))),
            [0xb79a5ab0d7a447b8, 0x77d2dc0dced18ebf],
        ),
        (
            "block_shuffle",
            block_shuffle(BlockShuffleConfig::new()),
            [0xa35e3350a8e39075, 0x9f75efbde9964568],
        ),
        (
            "block_shuffle_k3_s16",
            block_shuffle(
                BlockShuffleConfig::new()
                    .with_open_blocks(3)
                    .with_buffer_samples(16),
            ),
            [0x040734c0caf75ed5, 0x3c0e2613d2f72e8b],
        ),
        (
            "block_shuffle_shared_k2",
            block_shuffle(
                BlockShuffleConfig::new()
                    .with_open_blocks(2)
                    .with_buffer_samples(0)
                    .with_stratified(false),
            ),
            [0xb586de6bfb8a8a31, 0x51d778b587ef3a38],
        ),
        (
            "block_order_only",
            block_shuffle(BlockShuffleConfig::block_order_only()),
            [0x423350d7ff855d89, 0x63b4da47be577ded],
        ),
    ];
    // Drop and Uneven, then Pad: a change to one policy's stream shows as that policy's alone.
    let digests: Vec<(&str, [u64; 2])> = samplers
        .iter()
        .map(|(name, make, _)| {
            let kept = digest(
                make.as_ref(),
                &[RemainderPolicy::Drop, RemainderPolicy::Uneven],
            );
            (
                *name,
                [kept, digest(make.as_ref(), &[RemainderPolicy::Pad])],
            )
        })
        .collect();
    let pinned: Vec<(&str, [u64; 2])> = samplers
        .iter()
        .map(|(name, _, pinned)| (*name, *pinned))
        .collect();
    assert_eq!(digests, pinned);
}
