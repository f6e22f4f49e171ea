//! The process heap as "device memory" for CPU backends (flex): a counting global allocator
//! and the probe that reads it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{MemoryProbe, MemoryReading};

/// A [`GlobalAlloc`] over [`System`] that counts the bytes currently allocated and their peak.
/// Install it in the binary that trains on a CPU backend, then read it through a
/// [`HeapProbe`]:
///
/// ```
/// use kiln_ml_profile::{HeapProbe, MemoryProbe, PeakAlloc};
///
/// #[global_allocator]
/// static ALLOC: PeakAlloc = PeakAlloc::new();
///
/// fn main() {
///     let probe = HeapProbe::new(&ALLOC);
///     let buffer = vec![0u8; 1 << 20];
///     let reading = probe.read().unwrap();
///     assert!(reading.in_use_bytes >= buffer.len() as u64);
/// }
/// ```
///
/// The counters are relaxed atomics: two adds and a max per allocation, no lock.
#[derive(Debug, Default)]
pub struct PeakAlloc {
    current: AtomicUsize,
    peak: AtomicUsize,
}

impl PeakAlloc {
    /// An allocator that has counted nothing (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            current: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated through it and not yet freed.
    pub fn current_bytes(&self) -> u64 {
        self.current.load(Ordering::Relaxed) as u64
    }

    /// The highest [`current_bytes`](Self::current_bytes) since the last
    /// [`reset_peak`](Self::reset_peak) (or since start).
    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Relaxed) as u64
    }

    /// Starts a new peak window at the current figure.
    ///
    /// An allocation is two steps, the add and then the max into the peak, with no lock
    /// around them, so an allocation on another thread at the moment of the reset can write
    /// its pre-reset figure into the new window.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.current.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn grew(&self, bytes: usize) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn shrank(&self, bytes: usize) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counting around it neither allocates nor panics.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System::alloc` shares.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            self.grew(layout.size());
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            self.grew(layout.size());
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from this allocator, hence from `System`, with `layout`.
        unsafe { System.dealloc(pointer, layout) };
        self.shrank(layout.size());
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `pointer` came from `System` with `layout`; the caller upholds the rest.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        // On failure the old block stays allocated, so nothing changes.
        if !moved.is_null() {
            let old_size = layout.size();
            if new_size >= old_size {
                self.grew(new_size - old_size);
            } else {
                self.shrank(old_size - new_size);
            }
        }
        moved
    }
}

/// The [`MemoryProbe`] named `heap`: a [`PeakAlloc`]'s counts as the memory of a CPU backend.
/// In use and reserved are both the allocated bytes (the system allocator's own slack is not
/// seen); the peak is the allocator's since [`reset_peak`](MemoryProbe::reset_peak); the total
/// is the host's RAM.
#[derive(Debug, Clone, Copy)]
pub struct HeapProbe {
    alloc: &'static PeakAlloc,
    total_bytes: Option<u64>,
}

impl HeapProbe {
    /// A probe of `alloc`, which should be the `#[global_allocator]` (a `PeakAlloc` that
    /// is not installed counts nothing). Reads the host's RAM once, for the total.
    pub fn new(alloc: &'static PeakAlloc) -> Self {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        let total_bytes = Some(system.total_memory()).filter(|&bytes| bytes > 0);
        Self { alloc, total_bytes }
    }
}

impl MemoryProbe for HeapProbe {
    fn name(&self) -> &str {
        "heap"
    }

    fn read(&self) -> Result<MemoryReading, String> {
        let current = self.alloc.current_bytes();
        Ok(MemoryReading {
            in_use_bytes: current,
            reserved_bytes: current,
            total_bytes: self.total_bytes,
            peak_bytes: Some(self.alloc.peak_bytes().max(current)),
        })
    }

    /// Resets the allocator's peak ([`PeakAlloc::reset_peak`]).
    ///
    /// Unlike a `CubePoolProbe`, this probe keeps no peak of its own: the peak is the
    /// allocator's, shared by every `HeapProbe` of it. A [`DeviceMonitor`](super::DeviceMonitor)
    /// reading at the moment of the reset only reads, so it cannot carry a pre-reset figure
    /// into the new window (an allocation racing with the reset can, as `PeakAlloc` says), but
    /// a separate probe for the [`BatchSizeFinder`](crate::BatchSizeFinder) separates nothing
    /// either: a reset through any probe starts a new window for all of them.
    fn reset_peak(&self) {
        self.alloc.reset_peak();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_move_current_and_peak() {
        let alloc = PeakAlloc::new();
        let big = Layout::from_size_align(1 << 20, 8).expect("layout");
        // SAFETY: `big` has a non-zero size; every block is freed with the layout it has.
        unsafe {
            let block = alloc.alloc(big);
            assert!(!block.is_null());
            assert_eq!(alloc.current_bytes(), 1 << 20);

            let grown = alloc.realloc(block, big, 3 << 20);
            assert!(!grown.is_null());
            assert_eq!(alloc.current_bytes(), 3 << 20);
            let grown_layout = Layout::from_size_align(3 << 20, 8).expect("layout");

            let shrunk = alloc.realloc(grown, grown_layout, 2 << 20);
            assert_eq!(alloc.current_bytes(), 2 << 20);
            assert_eq!(alloc.peak_bytes(), 3 << 20);

            let zeroed = alloc.alloc_zeroed(big);
            assert_eq!(alloc.current_bytes(), 3 << 20);
            alloc.dealloc(zeroed, big);
            let shrunk_layout = Layout::from_size_align(2 << 20, 8).expect("layout");
            alloc.dealloc(shrunk, shrunk_layout);
        }
        assert_eq!(alloc.current_bytes(), 0);
        assert_eq!(alloc.peak_bytes(), 3 << 20);
        alloc.reset_peak();
        assert_eq!(alloc.peak_bytes(), 0);
    }

    #[test]
    fn the_probe_reads_the_allocator() {
        static ALLOC: PeakAlloc = PeakAlloc::new();
        let probe = HeapProbe::new(&ALLOC);
        assert_eq!(probe.name(), "heap");
        let layout = Layout::from_size_align(4096, 8).expect("layout");
        // SAFETY: a non-zero layout, freed with the same layout.
        let block = unsafe { ALLOC.alloc(layout) };
        let reading = probe.read().expect("the heap always reads");
        assert_eq!(reading.in_use_bytes, 4096);
        assert_eq!(reading.reserved_bytes, 4096);
        assert_eq!(reading.peak_bytes, Some(4096));
        assert!(reading.total_bytes.is_some());
        // SAFETY: `block` came from `ALLOC.alloc(layout)`.
        unsafe { ALLOC.dealloc(block, layout) };
        probe.reset_peak();
        assert_eq!(probe.read().expect("reads").peak_bytes, Some(0));
    }
}
