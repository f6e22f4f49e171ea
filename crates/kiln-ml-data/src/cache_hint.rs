//! Hints to the CPU's caches: ask for memory now, use it a little later.
//!
//! A shuffled plan reads samples scattered over a resident set of tens of megabytes, where
//! nearly every read misses the cache and the TLB. Loads that wait on each other queue those
//! misses one by one; prefetches do not wait, so a loop of them lets many misses run at once,
//! and the reads that follow find the lines in cache.

/// Asks the CPU to bring `value`'s first and last cache lines in (all of a value of up to two
/// lines), without waiting for them.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(value: &T) {
    let first = std::ptr::from_ref(value).cast::<u8>();
    let last = first.wrapping_add(std::mem::size_of_val(value).saturating_sub(1));
    prefetch_address(first);
    prefetch_address(last);
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
