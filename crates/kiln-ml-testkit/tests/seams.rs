//! The kiln-ml-core seams exercised end to end through the testkit fakes.

use std::sync::Arc;
use std::time::Duration;

use kiln_ml_core::{
    BlockIndex, BlockLayout, BlockSource, Event, Metric, Observer, Phase, PlanRequest, Position,
    Sampler, Shard, SkipReason, StepOutcome, StepReport, Timing,
};
use kiln_ml_testkit::{InOrderSampler, MeanMetric, MemorySource, RecordingObserver};

/// Executes a plan the way a loader does: read each block at its first use, emit in plan order.
fn execute(plan: &kiln_ml_core::Plan, source: &MemorySource<u64>) -> Vec<u64> {
    let mut blocks = std::collections::HashMap::new();
    let mut schedule = plan.schedule().iter().peekable();
    let mut out = Vec::with_capacity(plan.len());
    for (position, &sample) in plan.order().iter().enumerate() {
        while let Some(used) = schedule.next_if(|used| used.first_use == position as u64) {
            blocks.insert(used.block, source.read_block(used.block).unwrap());
        }
        let block = source.block_of(sample).unwrap();
        let first = source.blocks()[block as usize].first_sample;
        let items: &Vec<u64> = blocks
            .get(&block)
            .expect("the schedule reads every block before its first use");
        out.push(items[(sample - first) as usize]);
    }
    out
}

#[test]
fn a_sharded_plan_over_an_in_memory_layout_delivers_each_sample_once() {
    let source = MemorySource::with_ids(&[&[5, 0, 7], &[], &[12, 1], &[9]]);
    let sampler = InOrderSampler::new(2);
    let world = 3;
    let mut delivered = Vec::new();
    let mut scheduled_reads = 0;
    for rank in 0..world {
        let request = PlanRequest::new(1, 0).with_shard(Shard::new(rank, world).unwrap());
        let plan = sampler.plan(&source, &request).unwrap();
        assert_eq!(
            plan.len(),
            10,
            "34 samples / (2 x 3) = 5 global batches of 2 per rank"
        );
        scheduled_reads += plan.schedule().len() as u64;
        let items = execute(&plan, &source);
        // Items are their own sample ids, so what was read is what was planned.
        assert_eq!(items, plan.order());
        delivered.extend(items);
    }
    delivered.sort_unstable();
    assert_eq!(
        delivered,
        (0..30).collect::<Vec<_>>(),
        "the dropped tail is 30..34"
    );
    // Every block that holds a delivered sample was read exactly once per rank that needs it.
    assert!(source.reads() <= (world as u64) * source.num_blocks() as u64);
    assert_eq!(source.reads(), scheduled_reads);
}

#[test]
fn resuming_a_plan_continues_exactly_where_it_stopped() {
    let source = MemorySource::with_ids(&[&[4, 4], &[8]]);
    let sampler = InOrderSampler::new(4);
    let shard = Shard::new(1, 2).unwrap();
    let request = PlanRequest::new(9, 3).with_shard(shard);
    let full = sampler.plan(&source, &request).unwrap();
    let position = full.position_after(4).unwrap();
    assert_eq!(
        position,
        Position {
            epoch: 3,
            consumed: 8
        }
    );
    let resumed = sampler.resume(&source, &request, position).unwrap();
    assert_eq!(resumed.order(), &full.order()[4..]);
    assert_eq!(execute(&resumed, &source), full.order()[4..]);
}

#[test]
fn a_metric_merged_from_two_halves_equals_the_metric_over_the_whole() {
    let values: Vec<f64> = (0..101).map(|i| f64::from(i) * 0.37 - 11.0).collect();
    let mut whole = MeanMetric::default();
    whole.update(&values).unwrap();

    let (left_values, right_values) = values.split_at(40);
    let mut left = MeanMetric::default();
    let mut right = MeanMetric::default();
    left.update(left_values).unwrap();
    right.update(right_values).unwrap();
    left.merge(&right);

    let (merged, expected) = (left.compute().unwrap(), whole.compute().unwrap());
    assert!((merged - expected).abs() <= 1e-12, "{merged} vs {expected}");

    // A rejected input leaves the state unchanged and names the offending index.
    let error = left.update(&[1.0, f64::NAN]).unwrap_err();
    assert_eq!(error.index, 1);
    assert_eq!(left.compute().unwrap(), merged);

    // Forwarding through a boxed metric behaves the same, and reset forgets everything.
    let mut boxed = Box::new(MeanMetric::default());
    boxed.update(&values).unwrap();
    assert_eq!(boxed.compute(), whole.compute());
    boxed.reset();
    assert_eq!(boxed.compute(), None);
}

#[test]
fn an_observer_records_a_scripted_sequence_of_events() {
    let script = vec![
        Event::EpochStart { epoch: 0 },
        Event::BatchReady {
            epoch: 0,
            batch: 0,
            samples: 32,
            wait: Duration::from_millis(3),
        },
        Event::PhaseStart {
            phase: Phase::Forward,
            step: 1,
        },
        Event::PhaseEnd {
            phase: Phase::Forward,
            step: 1,
            elapsed: Duration::from_micros(250),
            sync: Some(Duration::from_micros(40)),
        },
        Event::Step(StepReport {
            step: 1,
            outcome: StepOutcome::Skipped(SkipReason::NonFiniteGradients),
            loss: Some(0.5),
            loss_scale: Some(32768.0),
            grad_norm: None,
            learning_rate: 1e-3,
        }),
        Event::EpochEnd {
            epoch: 0,
            steps: 1,
            samples: 32,
        },
    ];

    // One recorder shared by a producer thread (the loader) and a fan-out on this thread.
    let recorder = Arc::new(RecordingObserver::new());
    let fan_out: Vec<Box<dyn Observer>> = vec![Box::new(Arc::clone(&recorder))];
    let (first, rest) = script.split_at(2);
    let loader_side = Arc::clone(&recorder);
    let first = first.to_vec();
    std::thread::spawn(move || {
        for event in &first {
            loader_side.on_event(event);
        }
    })
    .join()
    .unwrap();
    for event in rest {
        fan_out.on_event(event);
    }

    assert_eq!(recorder.events(), script);
    assert_eq!(fan_out.timing(1), Timing::Host);
    assert_eq!(
        RecordingObserver::with_accurate_timing().timing(1),
        Timing::Phases
    );
    assert_eq!(recorder.take().len(), script.len());
    assert!(recorder.events().is_empty());
}

#[test]
fn failures_of_an_in_memory_source_name_the_block() {
    let source = MemorySource::with_ids(&[&[3], &[3]]);
    let block: BlockIndex = 1;
    source.fail_block(block);
    let error = source.read_block(block).unwrap_err().to_string();
    assert!(
        error.contains("block 1") && error.contains("file 1"),
        "{error}"
    );
}
