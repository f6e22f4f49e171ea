//! Property tests: the sharding and resume guarantees hold for every sampler on random layouts,
//! including empty blocks, one giant block and thousands of tiny ones.

use std::collections::HashMap;

use kiln_ml_core::{
    BlockLayout, Fingerprint, Layout, Plan, PlanRequest, Position, SampleId, Sampler, Shard,
};
use kiln_ml_sampler::{
    BlockShuffleConfig, RandomSampler, RemainderPolicy, SequentialSampler, Sharding,
};
use proptest::prelude::*;

fn layout_of(files: &[Vec<u64>]) -> Layout {
    let mut builder = Layout::builder();
    for (index, rows) in files.iter().enumerate() {
        builder.add_file(Fingerprint::builder().u64(index as u64).finish(), rows);
    }
    builder
        .build()
        .expect("generated layouts tile their samples")
}

/// Files of blocks: small mixed layouts with empty blocks, one giant block among tiny ones, or
/// thousands of tiny blocks.
fn files() -> impl Strategy<Value = Vec<Vec<u64>>> {
    let mixed = prop::collection::vec(prop::collection::vec(0u64..40, 0..5), 1..30);
    let giant = (
        prop::collection::vec(prop::collection::vec(0u64..3, 1..3), 0..6),
        500u64..3000,
    )
        .prop_map(|(mut files, giant)| {
            let at = files.len() / 2;
            files.insert(at, vec![giant]);
            files
        });
    let tiny = prop::collection::vec(prop::collection::vec(0u64..3, 1..4), 500..1200);
    prop_oneof![mixed, giant, tiny]
}

/// Which sampler: 0 sequential, 1 random, 2 block shuffle (with K, S, stratified).
#[derive(Debug, Clone, Copy)]
struct Kind {
    which: u8,
    open_blocks: usize,
    buffer_samples: usize,
    stratified: bool,
}

fn kinds() -> impl Strategy<Value = Kind> {
    (0u8..4, 1usize..24, 0usize..200, any::<bool>()).prop_map(
        |(which, open_blocks, buffer_samples, stratified)| Kind {
            // Weighted towards the block shuffle, the sampler with the most moving parts.
            which: which.min(2),
            open_blocks,
            buffer_samples,
            stratified,
        },
    )
}

fn sampler(kind: Kind, sharding: Sharding) -> Box<dyn Sampler> {
    match kind.which {
        0 => Box::new(SequentialSampler::new(sharding)),
        1 => Box::new(RandomSampler::new(sharding)),
        _ => Box::new(
            BlockShuffleConfig::new()
                .with_open_blocks(kind.open_blocks)
                .with_buffer_samples(kind.buffer_samples)
                .with_stratified(kind.stratified)
                .with_sharding(sharding)
                .init()
                .expect("generated configurations are valid"),
        ),
    }
}

fn policies() -> impl Strategy<Value = RemainderPolicy> {
    prop_oneof![
        Just(RemainderPolicy::Drop),
        Just(RemainderPolicy::Pad),
        Just(RemainderPolicy::Uneven)
    ]
}

/// The plans of every rank, or `None` when the configuration is impossible for this layout.
fn rank_plans(
    sampler: &dyn Sampler,
    layout: &Layout,
    seed: u64,
    epoch: u64,
    world: u32,
) -> Option<Vec<Plan>> {
    (0..world)
        .map(|rank| {
            let request = PlanRequest::new(seed, epoch).with_shard(Shard::new(rank, world).ok()?);
            sampler.plan(layout, &request).ok()
        })
        .collect()
}

/// Reassembles the global order from the ranks' plans by the sharding rule.
fn reassemble(plans: &[Plan], batch_size: usize) -> Vec<SampleId> {
    let mut global = Vec::new();
    let longest = plans.iter().map(Plan::len).max().unwrap_or(0);
    for start in (0..longest).step_by(batch_size) {
        for plan in plans {
            let order = plan.order();
            if start < order.len() {
                global.extend_from_slice(&order[start..(start + batch_size).min(order.len())]);
            }
        }
    }
    global
}

fn counts(ids: &[SampleId]) -> HashMap<SampleId, u64> {
    let mut counts = HashMap::new();
    for &id in ids {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

/// The global order of one epoch: one rank, batch 1, nothing dropped.
fn global_order(kind: Kind, layout: &Layout, seed: u64, epoch: u64) -> Vec<SampleId> {
    let single = sampler(kind, Sharding::new(1, RemainderPolicy::Uneven));
    single
        .plan(layout, &PlanRequest::new(seed, epoch))
        .expect("a non-empty layout has a plan")
        .order()
        .to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn sharding_covers_the_epoch_as_documented(
        files in files(),
        kind in kinds(),
        batch_size in 1u64..6,
        world in 1u32..5,
        policy in policies(),
        seed in any::<u64>(),
    ) {
        let layout = layout_of(&files);
        let samples = layout.num_samples();
        prop_assume!(samples >= u64::from(world));
        let sharding = Sharding::new(batch_size, policy);
        let sampler = sampler(kind, sharding);
        let global_batch = batch_size * u64::from(world);
        let Some(plans) = rank_plans(sampler.as_ref(), &layout, seed, 3, world) else {
            // Only Drop may refuse a layout with enough samples for every rank.
            prop_assert_eq!(policy, RemainderPolicy::Drop);
            prop_assert!(samples < global_batch);
            return Ok(());
        };
        let union = reassemble(&plans, batch_size as usize);
        let global = global_order(kind, &layout, seed, 3);
        // The global order itself is a permutation of the epoch's samples, whatever the
        // layout (empty blocks, one huge block, thousands of tiny ones).
        let mut sorted = global.clone();
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..samples).collect::<Vec<_>>());
        let seen = counts(&union);
        match policy {
            RemainderPolicy::Uneven => {
                // Every sample exactly once, in the global order.
                prop_assert_eq!(&union, &global);
            }
            RemainderPolicy::Drop => {
                let kept = (samples / global_batch * global_batch) as usize;
                prop_assert_eq!(&union[..], &global[..kept]);
                prop_assert!(seen.values().all(|&count| count == 1));
            }
            RemainderPolicy::Pad => {
                let padded = samples.div_ceil(global_batch) * global_batch;
                prop_assert_eq!(union.len() as u64, padded);
                prop_assert_eq!(&union[..samples as usize], &global[..]);
                // The extras: min(pad, N) distinct samples, cycled.
                let pad = padded - samples;
                let extras = &union[samples as usize..];
                let distinct = counts(extras).len() as u64;
                prop_assert_eq!(distinct, pad.min(samples));
                prop_assert!(extras.iter().all(|&id| id < samples));
            }
        }
        if policy != RemainderPolicy::Uneven {
            // Equal batch counts, all full.
            let lengths: Vec<usize> = plans.iter().map(Plan::len).collect();
            prop_assert!(lengths.iter().all(|&len| len == lengths[0]), "{:?}", lengths);
            prop_assert_eq!(lengths[0] as u64 % batch_size, 0);
        }
    }

    #[test]
    fn plans_are_deterministic_and_epochs_differ(
        files in files(),
        kind in kinds(),
        seed in any::<u64>(),
    ) {
        let layout = layout_of(&files);
        prop_assume!(layout.num_samples() > 0);
        let first = global_order(kind, &layout, seed, 0);
        prop_assert_eq!(&first, &global_order(kind, &layout, seed, 0));
        let non_empty = layout.blocks().iter().filter(|block| block.rows > 0).count();
        // With 12 or more blocks (or samples, for the random sampler) a repeat has odds below
        // 1 in 12! = 4.8e8.
        let shuffles = match kind.which {
            0 => false,
            1 => layout.num_samples() >= 12,
            _ => non_empty >= 12,
        };
        if shuffles {
            prop_assert_ne!(&first, &global_order(kind, &layout, seed, 1));
            prop_assert_ne!(&first, &global_order(kind, &layout, seed.wrapping_add(1), 0));
        }
    }

    #[test]
    fn resume_gives_the_rest_of_the_plan(
        files in files(),
        kind in kinds(),
        batch_size in 1u64..6,
        world in 1u32..5,
        policy in policies(),
        seed in any::<u64>(),
        cut in 0.0f64..=1.0,
    ) {
        let layout = layout_of(&files);
        prop_assume!(layout.num_samples() >= u64::from(world));
        let sampler = sampler(kind, Sharding::new(batch_size, policy));
        let Some(plans) = rank_plans(sampler.as_ref(), &layout, seed, 5, world) else {
            // Only Drop may refuse, when one global batch is more than the layout holds.
            prop_assert_eq!(policy, RemainderPolicy::Drop);
            prop_assert!(layout.num_samples() < batch_size * u64::from(world));
            return Ok(());
        };
        let rank = (seed % u64::from(world)) as u32;
        let plan = &plans[rank as usize];
        let batches = plan.len() as u64 / batch_size;
        let delivered = ((batches as f64 * cut) as u64).min(batches) * batch_size;
        let position = plan.position_after(delivered).expect("a batch boundary");
        let request = PlanRequest::new(seed, 5).with_shard(Shard::new(rank, world).expect("valid"));
        if delivered == plan.len() as u64 {
            prop_assert_eq!(position, Position::start_of(6));
            return Ok(());
        }
        prop_assert_eq!(position.consumed, delivered * u64::from(world));
        let resumed = sampler.resume(&layout, &request, position).expect("resumable");
        prop_assert_eq!(resumed.order(), &plan.order()[delivered as usize..]);
        prop_assert_eq!(resumed.already_consumed(), delivered);
    }

    #[test]
    fn resume_on_another_world_size_continues_the_global_order(
        files in files(),
        kind in kinds(),
        global_batch_log2 in 1u32..4,
        seed in any::<u64>(),
        cut in 0.0f64..=1.0,
    ) {
        // Global batch 2..8 kept constant; world changes from 1 to the whole global batch.
        let global_batch = 1u64 << global_batch_log2;
        let layout = layout_of(&files);
        let samples = layout.num_samples();
        prop_assume!(samples >= global_batch);
        let before = sampler(kind, Sharding::new(global_batch, RemainderPolicy::Drop));
        let plan = before.plan(&layout, &PlanRequest::new(seed, 0)).expect("enough samples");
        let batches = plan.len() as u64 / global_batch;
        let consumed = ((batches as f64 * cut) as u64).min(batches.saturating_sub(1)) * global_batch;
        prop_assume!(consumed < plan.len() as u64);
        let position = plan.position_after(consumed).expect("a batch boundary");
        for world in [2u32, global_batch as u32] {
            let after = sampler(kind, Sharding::new(global_batch / u64::from(world), RemainderPolicy::Drop));
            let resumed: Vec<Plan> = (0..world)
                .map(|rank| {
                    let request = PlanRequest::new(seed, 0).with_shard(Shard::new(rank, world).expect("valid"));
                    after.resume(&layout, &request, position).expect("resumable")
                })
                .collect();
            let union = reassemble(&resumed, (global_batch / u64::from(world)) as usize);
            prop_assert_eq!(&union[..], &plan.order()[consumed as usize..]);
        }
    }
}
