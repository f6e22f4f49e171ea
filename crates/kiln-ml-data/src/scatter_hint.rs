//! A hint from the loader to the decoder it reads through: the rows of the block being read
//! will be taken one by one, into batches of rows from many other blocks (a shuffled plan).
//!
//! [`ArrowRows`](crate::ArrowRows) then stages the chunk's fixed-width columns row-major while
//! decoding it, when they are in cache, and keeps only the columns the staging does not hold.
//! A shuffled plan keeps a few hundred chunks resident; holding their values twice (columns, and
//! the staging the columnar gather copies rows from) cost more in cache misses than the copy.
//! It is a hint only: a chunk read without it is staged when a gather first needs it, and a
//! chunk staged without its columns rebuilds them if asked for (see `Chunk::batch`).

use std::cell::Cell;

use kiln_ml_core::BlockUse;

thread_local! {
    static SCATTERED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `read` with this thread's hint set to `scattered`, and restores the hint after it
/// (also when `read` panics).
pub(crate) fn reading<R>(scattered: bool, read: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCATTERED.set(self.0);
        }
    }
    let _restore = Restore(SCATTERED.replace(scattered));
    read()
}

/// Whether the block being read on this thread will be taken row by row.
pub(crate) fn scattered() -> bool {
    SCATTERED.get()
}

/// Whether a plan takes the `rows` rows of a block row by row: when its samples spread over
/// more than [`SCATTERED_SPAN`] times as many plan positions as it has rows.
///
/// A block a plan reads in order spans its own rows (a sequential plan) or a few times them
/// (a rank's share of batches, a few blocks interleaved in runs); a block shuffle spreads each
/// block over hundreds of times its rows, a uniform shuffle over the whole epoch.
pub(crate) fn is_scattered(used: &BlockUse, rows: u64) -> bool {
    let span = used.last_use.saturating_sub(used.first_use) + 1;
    span > SCATTERED_SPAN.saturating_mul(rows)
}

/// See [`is_scattered`].
const SCATTERED_SPAN: u64 = 8;

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use kiln_ml_core::{
        Block, BlockIndex, BlockLayout, BlockSource, Fingerprint, PlanRequest, Sampler,
    };
    use kiln_ml_sampler::{BlockShuffleConfig, RemainderPolicy};
    use kiln_ml_testkit::{InOrderSampler, MemorySource, MemorySourceError};

    use super::*;
    use crate::{Loader, LoaderConfig, NoCollate};

    #[test]
    fn the_hint_is_set_for_the_read_and_restored_after_it_even_on_panic() {
        assert!(!scattered());
        assert!(reading(true, scattered));
        assert!(!scattered());
        let panicked = std::panic::catch_unwind(|| reading(true, || panic!("a failed read")));
        assert!(panicked.is_err());
        assert!(!scattered(), "restored while unwinding");
        reading(true, || {
            assert!(!reading(false, scattered));
            assert!(
                scattered(),
                "the outer read's hint is back after the inner one"
            );
        });
    }

    #[test]
    fn a_block_spread_over_many_times_its_rows_is_scattered() {
        let used = |first_use, last_use| BlockUse {
            block: 0,
            first_use,
            last_use,
        };
        // In order: the block's 100 rows at 100 consecutive positions.
        assert!(!is_scattered(&used(500, 599), 100));
        // Every other batch of a rank's share: twice its rows.
        assert!(!is_scattered(&used(0, 199), 100));
        assert!(!is_scattered(&used(0, 799), 100));
        assert!(is_scattered(&used(0, 800), 100));
        assert!(is_scattered(&used(0, 899_999), 740));
    }

    /// A source that notes the hint each read ran under.
    struct Recording {
        inner: MemorySource<u64>,
        hints: Mutex<Vec<bool>>,
    }

    impl BlockLayout for Recording {
        fn blocks(&self) -> &[Block] {
            self.inner.blocks()
        }
        fn fingerprint(&self) -> Fingerprint {
            self.inner.fingerprint()
        }
    }

    impl BlockSource for Recording {
        type Item = u64;
        type Error = MemorySourceError;
        fn read_block(&self, block: BlockIndex) -> Result<Vec<u64>, Self::Error> {
            self.hints.lock().unwrap().push(scattered());
            self.inner.read_block(block)
        }
    }

    /// The hint of each read of one epoch of `sampler` (32 blocks of 64 rows, batches of 64).
    fn hints_of(loader: &Loader<Recording, NoCollate>, sampler: &impl Sampler) -> Vec<bool> {
        let epoch = loader.plan_epoch(sampler, &PlanRequest::new(7, 0)).unwrap();
        assert_eq!(epoch.map(Result::unwrap).count(), 32);
        let hints = std::mem::take(&mut *loader.source().hints.lock().unwrap());
        assert_eq!(hints.len(), 32, "every block read once");
        // Reads run on the loader's workers, each under its own hint; none reaches the caller.
        assert!(
            !scattered(),
            "the hint does not leak into the caller's thread"
        );
        hints
    }

    #[test]
    fn the_loader_hints_reads_of_a_shuffled_plan_and_not_of_one_in_order() {
        let source = Recording {
            inner: MemorySource::new(vec![vec![(0..64).collect::<Vec<u64>>(); 4]; 8]),
            hints: Mutex::new(Vec::new()),
        };
        let loader = Loader::new(source, NoCollate, LoaderConfig::new().with_workers(2)).unwrap();
        let shuffle = BlockShuffleConfig::default()
            .with_batch_size(64)
            .with_remainder(RemainderPolicy::Uneven)
            .init()
            .unwrap();
        let hints = hints_of(&loader, &shuffle);
        // The block shuffle spreads each block over its window: nearly every block is
        // scattered (the last few to open share a shrinking window).
        let scattered = hints.iter().filter(|&&hint| hint).count();
        assert!(scattered >= 24, "{scattered} of 32 reads hinted");
        // In order, on the same workers after the shuffle: every read unhinted.
        assert!(
            hints_of(&loader, &InOrderSampler::new(64))
                .iter()
                .all(|&hint| !hint)
        );
    }
}
