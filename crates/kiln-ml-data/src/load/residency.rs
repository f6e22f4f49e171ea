//! How much of the data the loader holds in memory at once while it executes a plan.

use kiln_ml_core::BlockLayout;

use super::schedule::EpochSchedule;

/// What a loader holds in memory at most while executing a plan: blocks, source samples and,
/// when the source knows its blocks' sizes ([`BlockLayout::block_bytes`]: a Parquet row
/// group's uncompressed size), bytes resident at once; see
/// [`Loader::residency`](crate::Loader::residency).
///
/// The loader's side of kiln-ml-sampler's `quality::PlanResidency` (what an ideal block-at-a-time
/// reader holds for a plan): the same plan, with the prefetch window, the read-ahead and the
/// assembled batches counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoaderResidency {
    /// Most blocks resident at once for the batches within the prefetch window.
    pub peak_window_blocks: u64,
    /// Most source samples resident at once in those blocks.
    pub peak_window_samples: u64,
    /// Samples of blocks read ahead of the window: at most `read_ahead_blocks` blocks (the
    /// largest ones are counted).
    pub read_ahead_samples: u64,
    /// Samples held in assembled batches not yet handed over (prefetch depth × batch size).
    pub batch_samples: u64,
    /// Bytes of the blocks counted in `peak_window_samples` (at the peak of bytes, which may
    /// fall elsewhere), when every block's size is known.
    pub peak_window_bytes: Option<u64>,
    /// Bytes of the read-ahead blocks (the largest ones).
    pub read_ahead_bytes: Option<u64>,
    /// Bytes of the assembled batches, at the plan's average bytes per sample.
    pub batch_bytes: Option<u64>,
}

impl LoaderResidency {
    /// Source samples held at most (window, read-ahead and assembled batches together).
    pub fn max_samples(&self) -> u64 {
        self.peak_window_samples
            .saturating_add(self.read_ahead_samples)
            .saturating_add(self.batch_samples)
    }

    /// Bytes held at most (window, read-ahead and assembled batches together), when the
    /// source reports its blocks' sizes. The assembled batches count at the plan's average
    /// bytes per sample, so a window of the largest samples can exceed it by their excess.
    pub fn max_bytes(&self) -> Option<u64> {
        Some(
            self.peak_window_bytes?
                .saturating_add(self.read_ahead_bytes?)
                .saturating_add(self.batch_bytes?),
        )
    }

    /// The bound for a schedule: a block is held from when the prefetch window first reaches
    /// it until the batch holding its last use is assembled.
    pub(crate) fn of(
        schedule: &EpochSchedule,
        layout: &(impl BlockLayout + ?Sized),
        prefetch_batches: u64,
        read_ahead_blocks: usize,
    ) -> Self {
        let batches = schedule.batches as usize;
        let mut block_delta = vec![0i64; batches + 1];
        let mut sample_delta = vec![0i64; batches + 1];
        // In i128: a block's byte estimate can be any u64 (a footer's sizes are the file's word).
        let mut byte_delta = vec![0i128; batches + 1];
        let mut rows_by_size = Vec::with_capacity(schedule.uses.len());
        let mut bytes_by_size = Vec::with_capacity(schedule.uses.len());
        // Bytes count only when every block used reports its size.
        let mut bytes_known = true;
        let (mut total_rows, mut total_bytes) = (0u64, 0u64);
        for used in &schedule.uses {
            let rows = layout.blocks()[used.block as usize].rows;
            rows_by_size.push(rows);
            let bytes = layout.block_bytes(used.block);
            bytes_known &= bytes.is_some();
            let bytes = bytes.unwrap_or(0);
            bytes_by_size.push(bytes);
            total_rows += rows;
            total_bytes = total_bytes.saturating_add(bytes);
            // Held while the consumer is at batch c with
            // first_use < (c + prefetch) × batch size and last_use >= c × batch size.
            let first = (schedule.batch_of(used.first_use) + 1).saturating_sub(prefetch_batches);
            let last = schedule
                .batch_of(used.last_use)
                .min(schedule.batches.saturating_sub(1));
            if first > last {
                continue;
            }
            block_delta[first as usize] += 1;
            block_delta[last as usize + 1] -= 1;
            sample_delta[first as usize] += rows as i64;
            sample_delta[last as usize + 1] -= rows as i64;
            byte_delta[first as usize] += i128::from(bytes);
            byte_delta[last as usize + 1] -= i128::from(bytes);
        }
        fn peak<T: Copy + Into<i128>>(delta: &[T]) -> u64 {
            let held = delta
                .iter()
                .scan(0i128, |held, &change| {
                    *held += change.into();
                    Some(*held)
                })
                .max()
                .unwrap_or(0);
            u64::try_from(held.max(0)).unwrap_or(u64::MAX)
        }
        rows_by_size.sort_unstable_by(|a, b| b.cmp(a));
        bytes_by_size.sort_unstable_by(|a, b| b.cmp(a));
        // Size-budget batches vary: the largest run of `prefetch_batches` of them.
        let batch_samples = schedule.max_samples_of_batches(prefetch_batches);
        let known = |bytes: u64| bytes_known.then_some(bytes);
        Self {
            peak_window_blocks: peak(&block_delta),
            peak_window_samples: peak(&sample_delta),
            read_ahead_samples: rows_by_size.iter().take(read_ahead_blocks).sum(),
            batch_samples,
            peak_window_bytes: known(peak(&byte_delta)),
            read_ahead_bytes: known(
                bytes_by_size
                    .iter()
                    .take(read_ahead_blocks)
                    .fold(0u64, |sum, &bytes| sum.saturating_add(bytes)),
            ),
            // In u128: a large window of a many-terabyte source overflows u64 before the
            // division.
            batch_bytes: known(
                u64::try_from(
                    u128::from(batch_samples) * u128::from(total_bytes)
                        / u128::from(total_rows.max(1)),
                )
                .unwrap_or(u64::MAX),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Plan, Shard};
    use kiln_ml_testkit::MemorySource;

    use super::*;

    #[test]
    fn sequential_plans_hold_few_blocks_and_random_ones_many() {
        // One file of ten blocks of ten rows.
        let layout = MemorySource::with_ids(&[&[10; 10]]);
        let sequential = Plan::new(0, Shard::SINGLE, 5, (0..100).collect(), &layout).unwrap();
        let held = LoaderResidency::of(&EpochSchedule::new(&sequential, false), &layout, 2, 1);
        assert_eq!(held.peak_window_blocks, 2);
        assert_eq!(held.read_ahead_samples, 10);
        assert_eq!(held.batch_samples, 10);
        // Striding over every block: each block lives almost the whole epoch.
        let strided: Vec<u64> = (0..10)
            .flat_map(|row| (0..10).map(move |b| b * 10 + row))
            .collect();
        let strided = Plan::new(0, Shard::SINGLE, 5, strided, &layout).unwrap();
        let held = LoaderResidency::of(&EpochSchedule::new(&strided, false), &layout, 2, 1);
        assert_eq!(held.peak_window_blocks, 10);
        assert_eq!(held.peak_window_samples, 100);
        assert_eq!(held.max_bytes(), None, "the source does not know its sizes");
    }

    /// A layout whose blocks know their size: `bytes(rows)` of a block of `rows` samples.
    struct Sized(MemorySource<u64>, fn(u64) -> u64);

    impl BlockLayout for Sized {
        fn blocks(&self) -> &[kiln_ml_core::Block] {
            self.0.blocks()
        }
        fn fingerprint(&self) -> kiln_ml_core::Fingerprint {
            self.0.fingerprint()
        }
        fn block_bytes(&self, block: kiln_ml_core::BlockIndex) -> Option<u64> {
            Some((self.1)(self.0.blocks()[block as usize].rows))
        }
    }

    #[test]
    fn bytes_follow_the_blocks_sizes() {
        // 8 bytes per sample.
        let layout = Sized(MemorySource::with_ids(&[&[10; 10]]), |rows| 8 * rows);
        let sequential = Plan::new(0, Shard::SINGLE, 5, (0..100).collect(), &layout).unwrap();
        let held = LoaderResidency::of(&EpochSchedule::new(&sequential, false), &layout, 2, 1);
        assert_eq!(held.peak_window_bytes, Some(8 * held.peak_window_samples));
        assert_eq!(held.read_ahead_bytes, Some(8 * held.read_ahead_samples));
        assert_eq!(held.batch_bytes, Some(8 * held.batch_samples));
        assert_eq!(held.max_bytes(), Some(8 * held.max_samples()));
    }

    #[test]
    fn huge_block_sizes_saturate() {
        // A byte estimate can be any u64 (a footer's word): figures saturate, never wrap or
        // turn negative.
        let layout = Sized(MemorySource::with_ids(&[&[2, 2]]), |_| u64::MAX);
        let plan = Plan::new(0, Shard::SINGLE, 4, (0..4).collect(), &layout).unwrap();
        let held = LoaderResidency::of(&EpochSchedule::new(&plan, false), &layout, 2, 2);
        assert_eq!(held.peak_window_bytes, Some(u64::MAX));
        assert_eq!(held.read_ahead_bytes, Some(u64::MAX));
        assert_eq!(held.max_bytes(), Some(u64::MAX));
    }
}
