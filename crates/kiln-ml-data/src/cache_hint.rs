//! Hints to the CPU's caches: ask for memory now, use it a little later.
//!
//! A shuffled plan reads samples scattered over a resident set of tens of megabytes, where
//! nearly every read misses the cache and the TLB. Loads that wait on each other queue those
//! misses one by one; prefetches do not wait, so a loop of them lets many misses run at once,
//! and the reads that follow find the lines in cache.

/// Asks the CPU to bring every cache line of `value` in, without waiting for them.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(value: &T) {
    /// A cache line on the CPUs kiln runs on (x86_64, and most ARM cores).
    const LINE: usize = 64;
    let start = std::ptr::from_ref(value).cast::<u8>();
    let len = std::mem::size_of_val(value);
    // From the line holding the first byte to the one holding the last (an 80-byte value that
    // starts late in a line spans three): `start + k × LINE` falls in the k-th of them.
    let first_line = start as usize / LINE;
    let last_line = (start as usize + len.max(1) - 1) / LINE;
    for line in 0..=last_line - first_line {
        prefetch_address(start.wrapping_add(line * LINE));
    }
}

#[inline]
fn prefetch_address(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has, and it never faults
        // nor reads into the program: it is a hint to the cache.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
