//! The tests that measure this process's heap, in their own test binary: kiln-ml-profile's
//! counting allocator is its global allocator, and one test at a time holds [`heap_alone`], so
//! no other test's memory lands in a test's peaks. The batch-size finder sizes batches on
//! kiln's real trainer and flex with the heap as the device's memory, in process and with every
//! trial in a child process (this binary started again, running only the asking test).

use std::sync::{Mutex, MutexGuard};

use kiln_ml_profile::PeakAlloc;

mod common;

mod finder;
mod finder_child;
mod monitor_heap;

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc::new();

static HEAP: Mutex<()> = Mutex::new(());

/// Holds the heap for one test: the others wait.
fn heap_alone() -> MutexGuard<'static, ()> {
    HEAP.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
