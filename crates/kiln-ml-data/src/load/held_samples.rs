//! A resident block's samples, taken out one by one without writing to them.
//!
//! The coordinator takes every sample of an epoch out of its block. Kept as `Vec<Option<I>>`,
//! each block cost a second buffer and a copy of every sample on the worker that read it (an
//! `Option` is a word larger than its sample: 88 bytes for the `block_shuffle` example's
//! 80-byte rows, so a sample straddled three cache lines in a quarter of the slots), and each
//! take wrote `None` back into the sample's line. Under a shuffled plan those lines are
//! scattered over tens of megabytes and leave the cache long before the block is freed: each
//! take dirtied a line that then went back to memory. Here the samples stay in the buffer the
//! source returned, and which ones are still held is a bitmap, a few words per block, that
//! stays in cache.

use std::mem::{ManuallyDrop, MaybeUninit};

/// The samples of one block, each held until taken.
pub(crate) struct HeldSamples<I> {
    /// Initialized exactly where `held` has its bit set.
    samples: Vec<MaybeUninit<I>>,
    /// Bit `row % 64` of word `row / 64`: sample `row` is still held.
    held: Vec<u64>,
}

impl<I> HeldSamples<I> {
    /// Holds every sample of `samples`, in its own buffer (no copy).
    pub(crate) fn new(samples: Vec<I>) -> Self {
        let rows = samples.len();
        let mut samples = ManuallyDrop::new(samples);
        let (pointer, capacity) = (samples.as_mut_ptr(), samples.capacity());
        // SAFETY: `MaybeUninit<I>` has the size and alignment of `I` (it is
        // `repr(transparent)`), so the pointer, length and capacity of the `Vec<I>`, which is
        // never used again (nor dropped: `ManuallyDrop`), describe the same allocation as a
        // `Vec<MaybeUninit<I>>` whose first `rows` elements are initialized.
        let samples =
            unsafe { Vec::from_raw_parts(pointer.cast::<MaybeUninit<I>>(), rows, capacity) };
        let mut held = vec![u64::MAX; rows.div_ceil(64)];
        if let Some(last) = held.last_mut()
            && !rows.is_multiple_of(64)
        {
            *last = (1 << (rows % 64)) - 1;
        }
        Self { samples, held }
    }

    /// Whether sample `row` is held (false past the block's end).
    pub(crate) fn holds(&self, row: usize) -> bool {
        self.held
            .get(row / 64)
            .is_some_and(|word| word & (1 << (row % 64)) != 0)
    }

    /// Sample `row`, if held, without taking it.
    pub(crate) fn get(&self, row: usize) -> Option<&I> {
        if !self.holds(row) {
            return None;
        }
        // SAFETY: a held sample is initialized (see `samples`).
        Some(unsafe { self.samples[row].assume_init_ref() })
    }

    /// Takes sample `row` out, if held; its memory is only read.
    pub(crate) fn take(&mut self, row: usize) -> Option<I> {
        if !self.holds(row) {
            return None;
        }
        self.held[row / 64] &= !(1 << (row % 64));
        // SAFETY: the sample was held, so initialized, and is no longer: it is read exactly
        // once, and neither `take` nor `Drop` reads it again.
        Some(unsafe { self.samples[row].assume_init_read() })
    }

    /// Where sample `row` sits (held or not), for a cache hint; `None` past the block's end.
    pub(crate) fn slot(&self, row: usize) -> Option<&MaybeUninit<I>> {
        self.samples.get(row)
    }
}

impl<I> Drop for HeldSamples<I> {
    /// Drops the samples still held. If one of their `Drop`s panics, the rest are leaked (never
    /// dropped twice) and the buffer is still freed.
    fn drop(&mut self) {
        for (word_index, &word) in self.held.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                let row = word_index * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                // SAFETY: the sample is held, so initialized, and dropped once: the buffer is
                // freed right after without dropping its elements (`MaybeUninit`).
                unsafe { self.samples[row].assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn samples_are_taken_once_and_the_rest_dropped_with_the_block() {
        // 130 rows: two whole bitmap words and part of a third.
        let tracked: Vec<Arc<usize>> = (0..130).map(Arc::new).collect();
        let mut held = HeldSamples::new(tracked.clone());
        assert!(tracked.iter().all(|sample| Arc::strong_count(sample) == 2));
        assert_eq!(held.take(129).as_deref(), Some(&129));
        assert_eq!(held.take(129), None, "taken twice");
        assert_eq!(held.take(130), None, "past the end");
        assert_eq!(held.get(0).map(|sample| **sample), Some(0));
        assert_eq!(held.take(64).as_deref(), Some(&64));
        assert!(!held.holds(64) && held.holds(63) && held.holds(65));
        assert!(held.slot(129).is_some() && held.slot(130).is_none());
        drop(held);
        // Every sample, taken (and dropped by the test) or not, is dropped exactly once.
        assert!(tracked.iter().all(|sample| Arc::strong_count(sample) == 1));
    }

    /// Records its id when dropped.
    struct Tracked {
        id: usize,
        dropped: Rc<RefCell<Vec<usize>>>,
    }

    impl Clone for Tracked {
        fn clone(&self) -> Self {
            // A clone gets an id past every original's, so its drop is told apart.
            Self {
                id: self.id + 1_000,
                dropped: Rc::clone(&self.dropped),
            }
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.dropped.borrow_mut().push(self.id);
        }
    }

    #[test]
    fn every_sample_is_dropped_exactly_once_whatever_the_block_size() {
        for rows in [0, 1, 63, 64, 65, 128, 130] {
            let dropped = Rc::new(RefCell::new(Vec::new()));
            let samples = (0..rows)
                .map(|id| Tracked {
                    id,
                    dropped: Rc::clone(&dropped),
                })
                .collect();
            let mut held = HeldSamples::new(samples);
            // Take every third sample, clone (without taking) every fifth.
            let taken: Vec<Tracked> = (0..rows)
                .step_by(3)
                .filter_map(|row| held.take(row))
                .collect();
            assert_eq!(taken.len(), rows.div_ceil(3), "{rows} rows");
            let clones: Vec<Tracked> = (0..rows)
                .step_by(5)
                .filter_map(|row| held.get(row).cloned())
                .collect();
            assert!((0..rows).all(|row| held.holds(row) == (row % 3 != 0)));
            assert!(!held.holds(rows) && held.take(rows).is_none());
            assert!(dropped.borrow().is_empty());
            drop(held);
            drop(taken);
            drop(clones);
            let mut ids = dropped.borrow().clone();
            ids.sort_unstable();
            let mut expected: Vec<usize> = (0..rows)
                .chain(
                    (0..rows)
                        .step_by(5)
                        .filter(|row| row % 3 != 0)
                        .map(|row| row + 1_000),
                )
                .collect();
            expected.sort_unstable();
            assert_eq!(ids, expected, "{rows} rows");
        }
    }

    #[test]
    fn zero_sized_samples() {
        let mut held = HeldSamples::new(vec![(); 70]);
        assert_eq!(held.take(69), Some(()));
        assert_eq!(held.take(69), None);
        assert!(held.holds(68) && !held.holds(70));
    }

    #[test]
    fn a_block_of_a_whole_number_of_words_and_an_empty_one() {
        let mut held = HeldSamples::new((0..64u64).collect());
        assert!((0..64).all(|row| held.take(row) == Some(row as u64)));
        assert_eq!(held.take(0), None);
        let empty = HeldSamples::<String>::new(Vec::new());
        assert!(!empty.holds(0) && empty.get(0).is_none());
    }
}
