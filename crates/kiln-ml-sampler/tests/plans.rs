//! Plans executed the way a loader does, and the errors for impossible configurations.

use std::collections::HashMap;

use kiln_ml_core::{
    BlockIndex, BlockLayout, BlockSource, Error, Fingerprint, Layout, PlanRequest, Sampler, Shard,
};
use kiln_ml_sampler::{
    BlockShuffleConfig, BlockShuffleSampler, RandomSampler, RemainderPolicy, SequentialSampler,
    Sharding,
};
use kiln_ml_testkit::MemorySource;

/// Files of uneven size, a few with two blocks, one with an empty block; item = sample id.
fn source() -> MemorySource<u64> {
    let rows: Vec<[u64; 2]> = (0..40u64)
        .map(|file| [30 + (file * 17) % 50, if file % 3 == 0 { 25 } else { 0 }])
        .collect();
    let files: Vec<&[u64]> = rows.iter().map(|blocks| &blocks[..]).collect();
    MemorySource::with_ids(&files)
}

/// Executes a plan like a loader: read each block at its first use, drop it after its last.
/// Returns the emitted items and the most blocks held at once.
fn execute(source: &MemorySource<u64>, plan: &kiln_ml_core::Plan) -> (Vec<u64>, usize) {
    let mut held: HashMap<BlockIndex, Vec<u64>> = HashMap::new();
    let mut opens: HashMap<u64, Vec<BlockIndex>> = HashMap::new();
    let mut frees: HashMap<u64, Vec<BlockIndex>> = HashMap::new();
    for used in plan.schedule() {
        opens.entry(used.first_use).or_default().push(used.block);
        frees.entry(used.last_use).or_default().push(used.block);
    }
    let mut emitted = Vec::new();
    let mut most = 0;
    for (position, &sample) in plan.order().iter().enumerate() {
        let position = position as u64;
        for &block in opens.get(&position).into_iter().flatten() {
            let items = source
                .read_block(block)
                .expect("every planned block exists");
            assert!(
                held.insert(block, items).is_none(),
                "block {block} read twice"
            );
        }
        most = most.max(held.len());
        let block = source.block_of(sample).expect("planned samples exist");
        let first = source.blocks()[block as usize].first_sample;
        let items = held
            .get(&block)
            .expect("the block was read before its sample is emitted");
        emitted.push(items[(sample - first) as usize]);
        for block in frees.get(&position).into_iter().flatten() {
            held.remove(block);
        }
    }
    assert!(
        held.is_empty(),
        "blocks left over after the plan: {:?}",
        held.keys()
    );
    (emitted, most)
}

#[test]
fn a_loader_following_the_schedule_reads_each_block_once() {
    let source = source();
    let samplers: Vec<Box<dyn Sampler>> = vec![
        Box::new(SequentialSampler::default()),
        Box::new(RandomSampler::default()),
        Box::new(BlockShuffleSampler::default()),
        Box::new(
            BlockShuffleConfig::new()
                .with_open_blocks(4)
                .with_buffer_samples(64)
                .init()
                .unwrap(),
        ),
    ];
    for sampler in &samplers {
        let plan = sampler.plan(&source, &PlanRequest::new(11, 2)).unwrap();
        let reads_before = source.reads();
        let (emitted, _) = execute(&source, &plan);
        // Items are the sample ids, so the loader emitted exactly the plan.
        assert_eq!(emitted, plan.order());
        let non_empty = source.blocks().iter().filter(|b| b.rows > 0).count() as u64;
        assert_eq!(source.reads() - reads_before, non_empty);
    }
}

#[test]
fn open_blocks_bound_what_an_unbuffered_loader_holds() {
    let source = source();
    for open_blocks in [1, 3, 8] {
        let sampler = BlockShuffleConfig::new()
            .with_open_blocks(open_blocks)
            .with_buffer_samples(0)
            .init()
            .unwrap();
        let plan = sampler.plan(&source, &PlanRequest::new(5, 0)).unwrap();
        let (_, most) = execute(&source, &plan);
        assert!(
            most <= open_blocks,
            "{most} blocks held with K = {open_blocks}"
        );
    }
}

#[test]
fn impossible_configurations_are_refused_with_clear_errors() {
    let mut builder = Layout::builder();
    builder.add_file(Fingerprint::of_bytes(b"a"), &[3]);
    let three = builder.build().unwrap();
    let mut builder = Layout::builder();
    builder.add_file(Fingerprint::of_bytes(b"empty"), &[0, 0]);
    let empty = builder.build().unwrap();
    let four_ranks = PlanRequest::new(0, 0).with_shard(Shard::new(3, 4).unwrap());

    type Make = Box<dyn Fn(Sharding) -> Result<Box<dyn Sampler>, Error>>;
    let samplers: Vec<(&str, Make)> = vec![
        (
            "sequential",
            Box::new(|s| Ok(Box::new(SequentialSampler::new(s)))),
        ),
        ("random", Box::new(|s| Ok(Box::new(RandomSampler::new(s))))),
        (
            "block_shuffle",
            Box::new(|s| Ok(Box::new(BlockShuffleConfig::new().with_sharding(s).init()?))),
        ),
    ];
    for (name, make) in &samplers {
        let uneven = make(Sharding::new(1, RemainderPolicy::Uneven)).unwrap();
        let error = uneven.plan(&three, &four_ranks).unwrap_err();
        assert_eq!(
            error,
            Error::TooFewSamples {
                samples: 3,
                world: 4
            },
            "{name}"
        );
        assert!(error.to_string().contains("4 ranks cannot share 3 samples"));

        let error = uneven.plan(&empty, &PlanRequest::new(0, 0)).unwrap_err();
        assert_eq!(error, Error::EmptyLayout, "{name}");

        // Refused when the sampler is configured (block shuffle) or planned (the others).
        let zero = make(Sharding::new(0, RemainderPolicy::Pad))
            .and_then(|sampler| sampler.plan(&three, &PlanRequest::new(0, 0)).map(|_| ()));
        assert_eq!(zero.unwrap_err(), Error::ZeroBatchSize, "{name}");

        // Drop needs one whole global batch; Pad repeats samples to fill it.
        let two_ranks = PlanRequest::new(0, 0).with_shard(Shard::new(1, 2).unwrap());
        let drop = make(Sharding::new(2, RemainderPolicy::Drop)).unwrap();
        assert!(
            matches!(
                drop.plan(&three, &two_ranks),
                Err(Error::TooFewSamples { .. })
            ),
            "{name}"
        );
        let pad = make(Sharding::new(2, RemainderPolicy::Pad)).unwrap();
        assert_eq!(pad.plan(&three, &two_ranks).unwrap().len(), 2, "{name}");
    }
    let error = BlockShuffleConfig::new()
        .with_open_blocks(0)
        .init()
        .unwrap_err();
    assert!(
        error.to_string().contains("open_blocks must be at least 1"),
        "{error}"
    );
}

#[test]
fn padding_holds_few_blocks_more_than_the_shuffle_itself() {
    // One open block, no buffer: without a remainder the loader holds one block at a time (two
    // at a boundary). The repeats come from the last full global batch, so they keep only the
    // blocks of the epoch's end resident; repeats drawn from the whole epoch kept a block of
    // each repeat resident from its first use to the end.
    let source = source();
    let samples = source.num_samples();
    for batch in [48, 64, 100] {
        let sharding = Sharding::new(batch, RemainderPolicy::Pad);
        let sampler = BlockShuffleConfig::new()
            .with_open_blocks(1)
            .with_buffer_samples(0)
            .with_sharding(sharding)
            .init()
            .unwrap();
        let plan = sampler.plan(&source, &PlanRequest::new(5, 0)).unwrap();
        assert_eq!(plan.len() as u64, samples.div_ceil(batch) * batch);
        let (_, most) = execute(&source, &plan);
        // The smallest block holds 25 rows: a global batch spans at most ⌈batch / 25⌉ + 1.
        let bound = 1 + batch.div_ceil(25) as usize + 1;
        assert!(
            most <= bound,
            "batch {batch}: {most} blocks held (bound {bound})"
        );
    }
}
