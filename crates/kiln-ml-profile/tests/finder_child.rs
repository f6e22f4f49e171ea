//! The batch-size finder with every trial in a child process (this test binary started again,
//! running only the asking test), against the same search in process; kiln's real trainer on
//! flex, the heap as the device's memory (kiln-ml-profile's counting allocator).

use std::sync::Arc;
use std::time::Duration;

use kiln_ml_profile::{BatchSizeFinder, FinderMode, HeapProbe, MemoryProbe, PeakAlloc};
use kiln_ml_profile::{ChildCommand, serve_child_trial};

mod common;

use common::{BUDGET, model, train};

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc::new();

// The heap is the whole process's, so each test binary of the finder holds one test: no other
// test's memory lands in its peaks.

fn probe() -> Arc<dyn MemoryProbe> {
    Arc::new(HeapProbe::new(&ALLOCATOR))
}

#[test]
fn child_process_trials_find_the_same_boundary() {
    // In a child started by the finder, this runs the one trial asked for and exits.
    serve_child_trial(Some(probe().as_ref()), |batch, steps| {
        train(model(), batch, steps)
    });
    let model = model();
    let in_process = BatchSizeFinder::new(FinderMode::BinSearch)
        .probe(probe())
        .budget_bytes(BUDGET)
        .run_restoring(&model, train)
        .unwrap();
    let command = ChildCommand {
        program: std::env::current_exe().unwrap(),
        args: [
            "child_process_trials_find_the_same_boundary",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ]
        .map(str::to_owned)
        .to_vec(),
        timeout: Duration::from_secs(300),
    };
    let in_children = BatchSizeFinder::new(FinderMode::BinSearch)
        .budget_bytes(BUDGET)
        .child_process(command)
        .run(|_, _| Ok::<(), String>(()))
        .unwrap();
    assert!(in_children.child_process);
    assert!(
        in_children
            .trials
            .iter()
            .all(|trial| trial.peak_bytes.is_some())
    );
    // Each child measures only itself, the in-process trials also the test's own memory: the
    // absolute peaks differ, the growth per sample does not.
    let growth = |report: &kiln_ml_profile::FinderReport| {
        let peak = |size: usize| {
            report
                .trials
                .iter()
                .find(|trial| trial.batch_size == size)
                .and_then(|trial| trial.peak_bytes)
                .unwrap() as f64
        };
        (peak(512) - peak(256)) / 256.0
    };
    let (children, here) = (growth(&in_children), growth(&in_process));
    assert!(
        (children - here).abs() < 0.01 * here,
        "{children} vs {here} bytes per sample"
    );
    let peak = |report: &kiln_ml_profile::FinderReport| {
        report
            .trials
            .iter()
            .find(|trial| trial.batch_size == report.largest_fitting)
            .and_then(|trial| trial.peak_bytes)
            .unwrap()
    };
    assert!(peak(&in_children) <= BUDGET);
}
