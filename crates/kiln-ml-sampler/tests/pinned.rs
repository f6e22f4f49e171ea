//! Pinned plans: a digest of every plan (order and block schedule) and every resumed plan over
//! a grid of layouts, seeds, epochs, shards, batch sizes and remainder policies, per sampler.
//!
//! If a digest changes, runs resumed from an older release would not continue where they
//! stopped. Change one only deliberately: for one remainder policy's stream with a revision of
//! that policy's stream tag (`RemainderPolicy::stream_tag`, in the settings fingerprint, so
//! positions saved under the old stream are refused), across the board with a bump of the RNG
//! key tag. Pad's stream changed on 2026-11-28 (repeats drawn from the epoch's last full global
//! batch); the Drop and Uneven digests then stayed what they were. The block shuffle's stream
//! changed on 2026-11-29 where its draws turn lopsided (version 2 of its settings fingerprint,
//! for more than four open blocks; `lopsided_plans_are_pinned`); the grid's digests stayed.

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

/// The digest of every plan and resumed plan a sampler builds over `layouts` and the grid of
/// batch sizes, seeds, epochs and shards, under the remainder policies `remainders`.
fn digest(
    layouts: &[Layout],
    make: &dyn Fn(Sharding) -> Box<dyn Sampler>,
    remainders: &[RemainderPolicy],
) -> u64 {
    let mut digest = Digest::new();
    for layout in layouts {
        for batch_size in [1, 4] {
            for &remainder in remainders {
                let sampler = make(Sharding::new(batch_size, remainder));
                for (seed, epoch) in [(0, 0), (42, 0), (42, 3), (2024, 7)] {
                    for world in [1, 2, 3] {
                        for rank in 0..world {
                            let request = PlanRequest::new(seed, epoch)
                                .with_shard(Shard::new(rank, world).unwrap());
                            let plan = sampler.plan(layout, &request);
                            digest.plan(&plan);
                            let Ok(plan) = plan else { continue };
                            // Resume two local batches in, when the plan is that long.
                            let delivered = 2 * batch_size;
                            if let Ok(position) = plan.position_after(delivered) {
                                digest.plan(&sampler.resume(layout, &request, position));
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
    assert_pinned(&layouts(), &samplers);
}

/// Asserts each sampler's pinned digests over `layouts`: Drop and Uneven, then Pad, so that a
/// change to one policy's stream shows as that policy's alone.
fn assert_pinned(layouts: &[Layout], samplers: &[(&str, Make, [u64; 2])]) {
    let digests: Vec<(&str, [u64; 2])> = samplers
        .iter()
        .map(|(name, make, _)| {
            let kept = digest(
                layouts,
                make.as_ref(),
                &[RemainderPolicy::Drop, RemainderPolicy::Uneven],
            );
            let padded = digest(layouts, make.as_ref(), &[RemainderPolicy::Pad]);
            (*name, [kept, padded])
        })
        .collect();
    let pinned: Vec<(&str, [u64; 2])> = samplers
        .iter()
        .map(|(name, _, pinned)| (*name, *pinned))
        .collect();
    assert_eq!(digests, pinned);
}

/// One block holding most of the data beside many small ones, and a shared queue whose last
/// blocks drain unevenly: with more than four open lanes, the block shuffle's draws leave
/// rejection for a Fenwick tree here, which the grid above (at most four lanes with weight at
/// once, or even ones) never reaches. These streams are version 2 of the block shuffle's
/// settings fingerprint (2026-11-29); version 1 drew them by rejection throughout.
#[test]
fn lopsided_plans_are_pinned() {
    let lopsided = [
        layout(&[&[5; 40], &[2000], &[3, 0, 4]]),
        layout(&[&[40, 3], &[17; 9], &[60, 1, 25]]),
    ];
    let samplers: Vec<(&str, Make, [u64; 2])> = vec![
        (
            "block_shuffle",
            block_shuffle(BlockShuffleConfig::new()),
            [0xa66606946c5256e9, 0x53937ea41e1081d9],
        ),
        (
            "block_shuffle_shared_k8_s4",
            block_shuffle(
                BlockShuffleConfig::new()
                    .with_open_blocks(8)
                    .with_buffer_samples(4)
                    .with_stratified(false),
            ),
            [0x4e79b1c27335a78d, 0x200c06b80de1fa42],
        ),
    ];
    assert_pinned(&lopsided, &samplers);
}

/// An even layout of 50K samples in 37 files of 600 to 2,000 rows (row groups of at most 1,024),
/// block-shuffled through 64 lanes. Near an epoch's end a few rows remain scattered over many
/// lanes, lopsided enough for a switch to the Fenwick tree; the block shuffle keeps rejection
/// there, so these plans are still version 1's draws (pinned before the tree existed).
#[test]
fn even_plans_keep_their_draws_to_the_ragged_end() {
    let files: Vec<Vec<u64>> = (0..37u64)
        .map(|file| {
            let rows = 600 + (file * 7_919) % 1_400;
            let groups = rows.div_ceil(1_024);
            (0..groups)
                .map(|group| rows / groups + u64::from(group < rows % groups))
                .collect()
        })
        .collect();
    let files: Vec<&[u64]> = files.iter().map(|rows| &rows[..]).collect();
    let even = layout(&files);
    let sampler = BlockShuffleConfig::new()
        .with_open_blocks(64)
        .init()
        .unwrap();
    let mut digest = Digest::new();
    for seed in 0..6 {
        for epoch in 0..3 {
            digest.plan(&sampler.plan(&even, &PlanRequest::new(seed, epoch)));
        }
    }
    assert_eq!(digest.0, 0x9a41eb16f9993743);
}
