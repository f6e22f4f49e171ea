//! How many batches the loader assembles ahead of the consumer when the configuration leaves it
//! to the loader: as many as fit in a byte budget, from the sizes the source reports.
//!
//! Each batch handed to a worker, and each batch handed back, costs a thread wake-up. Small
//! batches (64 rows of 80 bytes take 5 KB) come by the hundred thousand per second, and a shallow
//! window then spends the machine on wake-ups: with 4 batches of prefetch such an epoch ran at a
//! third to half the speed of a window of 64 on 2 cores (docs/performance.md). Large batches
//! (images, long sequences) need only a few in flight and must not hold gigabytes. So the depth
//! follows the bytes: `prefetch_bytes` over the bytes of one batch, within
//! [`MIN_AUTO_DEPTH`]..=[`MAX_AUTO_DEPTH`].

use kiln_ml_core::BlockLayout;

use super::config::LoaderConfig;

/// The shallowest window the loader picks itself: one batch collating while one waits.
pub(crate) const MIN_AUTO_DEPTH: usize = 2;

/// The deepest window the loader picks itself: beyond it the gain from fewer wake-ups is nil
/// and a sequential plan holds more blocks.
pub(crate) const MAX_AUTO_DEPTH: usize = 256;

/// The depth when the source does not report its blocks' sizes.
pub(crate) const UNKNOWN_SIZE_DEPTH: usize = 16;

/// The prefetch depth, in batches, for batches of `batch_size` samples of `layout`'s blocks:
/// the configured one, or the one the byte budget allows.
pub(crate) fn prefetch_depth(
    config: &LoaderConfig,
    layout: &(impl BlockLayout + ?Sized),
    batch_size: u64,
) -> usize {
    if let Some(depth) = config.prefetch_batches {
        return depth;
    }
    match bytes_per_sample(layout) {
        Some(bytes) => {
            let batch_bytes = (bytes * batch_size.max(1) as f64).max(1.0);
            let fits = (config.prefetch_bytes as f64 / batch_bytes).floor() as usize;
            fits.clamp(MIN_AUTO_DEPTH, MAX_AUTO_DEPTH)
        }
        None => UNKNOWN_SIZE_DEPTH,
    }
}

/// The mean bytes per sample over every block, when each block reports its size.
fn bytes_per_sample(layout: &(impl BlockLayout + ?Sized)) -> Option<f64> {
    let (mut bytes, mut rows) = (0u64, 0u64);
    for (index, block) in layout.blocks().iter().enumerate() {
        bytes = bytes.saturating_add(layout.block_bytes(index as u32)?);
        rows = rows.saturating_add(block.rows);
    }
    (rows > 0).then(|| bytes as f64 / rows as f64)
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Block, Fingerprint};

    use super::*;

    /// Two blocks of 100 rows, each of `bytes` bytes (`None`: unknown).
    struct Sized {
        blocks: Vec<Block>,
        bytes: Option<u64>,
    }

    impl Sized {
        fn new(bytes: Option<u64>) -> Self {
            let block = |first_sample| Block {
                file: 0,
                index_in_file: 0,
                first_sample,
                rows: 100,
            };
            Self {
                blocks: vec![block(0), block(100)],
                bytes,
            }
        }
    }

    impl BlockLayout for Sized {
        fn blocks(&self) -> &[Block] {
            &self.blocks
        }
        fn fingerprint(&self) -> Fingerprint {
            Fingerprint::of_bytes(b"sized")
        }
        fn block_bytes(&self, _block: u32) -> Option<u64> {
            self.bytes
        }
    }

    #[test]
    fn the_depth_is_the_byte_budget_over_a_batch_within_bounds() {
        let config = LoaderConfig::new().with_prefetch_bytes(1 << 20);
        // 8,000 bytes a block of 100 rows: 80 a sample, 5,120 a batch of 64: 204 fit in 1 MiB.
        assert_eq!(prefetch_depth(&config, &Sized::new(Some(8_000)), 64), 204);
        // Tiny samples: the upper bound; huge ones: the lower bound.
        assert_eq!(
            prefetch_depth(&config, &Sized::new(Some(100)), 64),
            MAX_AUTO_DEPTH
        );
        assert_eq!(
            prefetch_depth(&config, &Sized::new(Some(100 << 20)), 64),
            MIN_AUTO_DEPTH
        );
        assert_eq!(
            prefetch_depth(&config, &Sized::new(None), 64),
            UNKNOWN_SIZE_DEPTH
        );
    }

    #[test]
    fn a_configured_depth_wins() {
        let config = LoaderConfig::new().with_prefetch_batches(3);
        assert_eq!(prefetch_depth(&config, &Sized::new(Some(8_000)), 64), 3);
        assert_eq!(prefetch_depth(&config, &Sized::new(None), 64), 3);
    }
}
