//! A small, bounded set of shared values: equal values handed in come back as one `Arc`.
//!
//! Used where many objects describe the same thing (the files of one schema, the chunks of one
//! layout) and a hot path compares them: with one shared `Arc`, a pointer comparison answers
//! without reading either value.

use std::sync::{Arc, Mutex, PoisonError};

/// Values shared so far, the newest last, at most `most` of them. A process holds a few
/// distinct values; past `most`, the oldest is forgotten (what holds it keeps it, and a later
/// equal value starts a new shared one), so sharing is an optimization, never a condition.
pub(crate) struct Interner<T: ?Sized> {
    held: Mutex<Vec<Arc<T>>>,
    most: usize,
}

impl<T: ?Sized + PartialEq> Interner<T> {
    /// An empty interner keeping at most `most` values.
    pub(crate) const fn new(most: usize) -> Self {
        Self {
            held: Mutex::new(Vec::new()),
            // At least one: `intern` replaces the oldest value when full.
            most: if most == 0 { 1 } else { most },
        }
    }

    /// The shared value equal to `value`: one already held, or `value` itself, now held.
    pub(crate) fn intern(&self, value: Arc<T>) -> Arc<T> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = held.iter().find(|shared| ***shared == *value) {
            return Arc::clone(shared);
        }
        if held.len() >= self.most {
            held.remove(0);
        }
        held.push(Arc::clone(&value));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_arc_and_the_oldest_is_forgotten_when_full() {
        let interner = Interner::<[u64]>::new(2);
        let first = interner.intern(Arc::from([1, 2]));
        assert!(Arc::ptr_eq(&first, &interner.intern(Arc::from([1, 2]))));
        let other = interner.intern(Arc::from([3]));
        assert!(!Arc::ptr_eq(&first, &other));
        // A third distinct value pushes [1, 2] out: an equal one is now a new Arc.
        let newest = interner.intern(Arc::from([4]));
        let again = interner.intern(Arc::from([1, 2]));
        assert_eq!(again, first);
        assert!(!Arc::ptr_eq(&again, &first));
        // Held now: [4] and the new [1, 2].
        assert!(Arc::ptr_eq(&newest, &interner.intern(Arc::from([4]))));
        assert!(Arc::ptr_eq(&again, &interner.intern(Arc::from([1, 2]))));
    }

    #[test]
    fn a_capacity_of_zero_holds_one() {
        let interner = Interner::<[u64]>::new(0);
        let first = interner.intern(Arc::from([1]));
        assert!(Arc::ptr_eq(&first, &interner.intern(Arc::from([1]))));
    }
}
