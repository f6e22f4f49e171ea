//! The batch-size finder on kiln's real trainer and flex, with the heap as the device's memory
//! (this test binary installs kiln-ml-profile's counting allocator), in process. (Trials in child
//! processes: `finder_child.rs`.)

use std::sync::Arc;

use kiln_ml_profile::{BatchSizeFinder, FinderMode, HeapProbe, MemoryProbe, PeakAlloc};

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
fn the_finder_meets_a_heap_budget_on_flex() {
    let largest = binsearch_stops_at_the_budget_and_keeps_its_margin();
    power_and_shrink_answer_sizes_that_fit(largest);
}

/// The largest batch that fits, as the binary search found it.
fn binsearch_stops_at_the_budget_and_keeps_its_margin() -> usize {
    let model = model();
    let finder = BatchSizeFinder::new(FinderMode::BinSearch)
        .probe(probe())
        .budget_bytes(BUDGET);
    let report = finder.run_restoring(&model, train).unwrap();
    let largest = report.largest_fitting;
    assert!(largest > 16, "{report:?}");
    assert_eq!(report.found, (largest as f64 * 0.95) as usize);
    // Every trial that fitted stayed under the budget, every other went over it.
    for trial in &report.trials {
        let peak = trial.peak_bytes.expect("the heap probe reads a peak");
        assert_eq!(trial.fits, peak <= BUDGET, "{trial:?}");
    }
    // Checked apart from the search: the answer fits, a few more samples do not.
    let check = |size| finder.try_size(size, |batch, steps| train(model.clone(), batch, steps));
    assert!(check(report.found).unwrap().fits);
    assert!(!check(largest + 8).unwrap().fits);
    largest
}

/// `largest`: the largest batch that fits. How many samples fit in the budget depends on
/// flex's build (with its `rayon` feature, which burn-train turns on, matrix products keep
/// buffers per thread), so the shrinking search starts from a multiple of it, not from a
/// fixed size.
fn power_and_shrink_answer_sizes_that_fit(largest: usize) {
    let model = model();
    let finder = |mode| {
        BatchSizeFinder::new(mode)
            .probe(probe())
            .budget_bytes(BUDGET)
    };
    let power = finder(FinderMode::Power)
        .run_restoring(&model, train)
        .unwrap();
    assert!(power.found.is_power_of_two(), "{power:?}");
    let shrink = finder(FinderMode::Shrink)
        .start(largest * 4)
        .run_restoring(&model, train)
        .unwrap();
    // Shrinking by 0.9 stops at its first size that fits, at or above the power of two.
    assert!(shrink.found >= power.found, "{shrink:?} vs {power:?}");
    assert!(
        shrink.trials.last().is_some_and(|trial| trial.fits),
        "{shrink:?}"
    );
    assert!(shrink.trials.iter().rev().skip(1).all(|trial| !trial.fits));
    // Both answers fit when tried apart from their searches (they keep the 5% margin below
    // what fitted), and neither exceeds the largest size the binary search found.
    let check = finder(FinderMode::Power);
    for report in [&power, &shrink] {
        assert!(report.found <= largest, "{report:?} above {largest}");
        let trial = check
            .try_size(report.found, |batch, steps| {
                train(model.clone(), batch, steps)
            })
            .unwrap();
        assert!(
            trial.fits,
            "{:?} answered {} that does not fit: {trial:?}",
            report.mode, report.found
        );
    }
}
