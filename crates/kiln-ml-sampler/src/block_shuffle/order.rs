//! The file-aware block shuffle's global order, and the sampler that shards it.

use kiln_ml_core::{BlockLayout, Error, Fingerprint, Result, SampleId};

use super::interleave::interleave;
use super::weights;
use crate::order::GlobalOrder;
use crate::rng::{PlanRng, Purpose};
use crate::sharded::Sharded;
use crate::windows::balanced_windows;

/// Shuffles blocks, not samples: reads stay sequential inside each block while batches mix many
/// files. A [`BlockShuffleOrder`] sharded over ranks by the configured
/// [`Sharding`](crate::Sharding); build it with [`BlockShuffleConfig::init`](super::BlockShuffleConfig::init)
/// or [`BlockShuffleSampler::new`].
///
/// See [`BlockShuffleConfig`](super::BlockShuffleConfig) for the defaults and their memory cost,
/// and [`quality`](crate::quality) to measure how well an order mixes.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::BlockShuffleSampler;
///
/// let mut builder = Layout::builder();
/// for file in 0..20u64 {
///     builder.add_file(Fingerprint::builder().u64(file).finish(), &[100, 50]);
/// }
/// let layout = builder.build()?;
/// let sampler = BlockShuffleSampler::default();
/// let plan = sampler.plan(&layout, &PlanRequest::new(42, 0))?;
/// assert_eq!(plan.len(), 3000);
/// assert_eq!(plan, sampler.plan(&layout, &PlanRequest::new(42, 0))?);
/// assert_ne!(plan.order(), sampler.plan(&layout, &PlanRequest::new(42, 1))?.order());
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub type BlockShuffleSampler = Sharded<BlockShuffleOrder>;

/// The block shuffle's global order: K, S and stratification of a
/// [`BlockShuffleConfig`](super::BlockShuffleConfig), without its sharding.
///
/// An epoch's global order is made in three steps, all from ChaCha8 streams seeded by the run
/// seed and the epoch (never by the world size, worker count or timing):
///
/// 1. **Block order.** The non-empty blocks get a Fisher-Yates order: within each of K
///    contiguous strata of the layout when stratified (the default), or all together.
/// 2. **Interleave.** K lanes read their blocks front to back; each next sample comes from a
///    lane drawn with probability proportional to its remaining rows, so the lanes progress
///    evenly.
/// 3. **Buffer.** The interleaved stream is cut into windows of about S samples and each window
///    is shuffled (Fisher-Yates).
///
/// Built only from a validated configuration (K of at least 1); [`Default`] is
/// [`BlockShuffleConfig::default`](super::BlockShuffleConfig::default)'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockShuffleOrder {
    /// K, at least 1.
    pub(super) open_blocks: usize,
    /// S; 0 or 1 means no buffer.
    pub(super) buffer_samples: usize,
    pub(super) stratified: bool,
}

impl GlobalOrder for BlockShuffleOrder {
    /// Every sample of `layout` exactly once. Depends only on the layout's blocks, the seed, the
    /// epoch and K, S and stratification.
    fn global_order(
        &self,
        layout: &dyn BlockLayout,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<SampleId>> {
        let samples = layout.num_samples();
        let capacity = usize::try_from(samples).map_err(|_| {
            Error::InvalidConfig(format!(
                "{samples} samples do not fit in memory on this platform"
            ))
        })?;
        let mut order = Vec::with_capacity(capacity);
        interleave(
            layout.blocks(),
            self.open_blocks,
            self.stratified,
            &mut PlanRng::new(seed, epoch, Purpose::BlockOrder),
            &mut PlanRng::new(seed, epoch, Purpose::Interleave),
            &mut order,
        );
        shuffle_windows(
            &mut order,
            self.buffer_samples,
            &mut PlanRng::new(seed, epoch, Purpose::Buffer),
        );
        Ok(order)
    }

    /// Over a layout whose blocks tile its samples, which the samplers check first.
    fn is_permutation(&self) -> bool {
        true
    }

    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        // Version 2 draws lanes through a Fenwick tree once their weights turn lopsided, which
        // changed those plans; with at most four open blocks it cannot happen, so their stream
        // keeps version 1 and their saved positions stay valid.
        let version = if weights::may_leave_rejection(self.open_blocks) {
            2
        } else {
            1
        };
        Some(
            Fingerprint::builder()
                .str("kiln-sampler block shuffle order")
                .u64(version)
                .u64(self.open_blocks as u64)
                .u64(self.buffer_samples as u64)
                .u64(u64::from(self.stratified))
                .finish(),
        )
    }
}

/// Shuffles `order` in consecutive windows of about `window` samples
/// ([`balanced_windows`]: their sizes differ by at most one).
fn shuffle_windows(order: &mut [SampleId], window: usize, rng: &mut PlanRng) {
    if window < 2 || order.len() < 2 {
        return;
    }
    for range in balanced_windows(order.len(), window) {
        rng.shuffle(&mut order[range]);
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout};

    use super::*;
    use crate::BlockShuffleConfig;

    #[test]
    fn plans_are_pinned() {
        // A pinned order: if this changes, resumed runs from older releases would not continue
        // where they stopped. Change it only with a deliberate bump of the RNG key tag.
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"a"), &[4, 3]);
        builder.add_file(Fingerprint::of_bytes(b"b"), &[5]);
        builder.add_file(Fingerprint::of_bytes(b"c"), &[0, 4]);
        let layout = builder.build().unwrap();
        for (config, pinned) in [
            (
                BlockShuffleConfig::new()
                    .with_open_blocks(2)
                    .with_buffer_samples(4),
                PINNED_STRATIFIED,
            ),
            (
                BlockShuffleConfig::new()
                    .with_open_blocks(2)
                    .with_buffer_samples(0)
                    .with_stratified(false),
                PINNED_SHARED,
            ),
        ] {
            let order = config
                .init()
                .unwrap()
                .order()
                .global_order(&layout, 2024, 7)
                .unwrap();
            assert_eq!(order, pinned, "{config:?}");
        }
    }
    const PINNED_STRATIFIED: [SampleId; 16] =
        [13, 15, 12, 14, 4, 5, 7, 6, 9, 0, 1, 8, 2, 11, 10, 3];
    const PINNED_SHARED: [SampleId; 16] = [0, 1, 7, 2, 8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 3, 6];

    #[test]
    fn the_stream_version_moves_only_where_draws_can_leave_rejection() {
        // Fingerprints under version 1, before lopsided draws moved to a Fenwick tree: open
        // blocks up to four keep them (their plans cannot change), more get version 2.
        let fingerprint = |open_blocks| {
            let config = BlockShuffleConfig::new().with_open_blocks(open_blocks);
            let fingerprint = config
                .init()
                .unwrap()
                .order()
                .settings_fingerprint()
                .unwrap();
            format!("{fingerprint}")
        };
        for (open_blocks, version_1) in VERSION_1_FINGERPRINTS {
            let now = fingerprint(open_blocks);
            assert_eq!(now == version_1, open_blocks <= 4, "{open_blocks} {now}");
        }
    }
    const VERSION_1_FINGERPRINTS: [(usize, &str); 4] = [
        (1, "61f5c92cc7c7e4805a56a7b562055c05"),
        (4, "6f12982a4c30901d710dc7f056cf5ae4"),
        (5, "e9345ee2c6b8ea831ebcb2156b679a7f"),
        (192, "ac314eb53c2fc203a0cee1191e703abd"),
    ];

    #[test]
    fn windows_are_balanced_and_shuffled_in_place() {
        let mut order: Vec<SampleId> = (0..10).collect();
        shuffle_windows(&mut order, 4, &mut PlanRng::new(1, 0, Purpose::Buffer));
        // 3 windows of sizes 4, 3, 3: each keeps its own samples.
        let mut parts = [
            order[..4].to_vec(),
            order[4..7].to_vec(),
            order[7..].to_vec(),
        ];
        for part in &mut parts {
            part.sort_unstable();
        }
        assert_eq!(parts, [vec![0, 1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
        assert_ne!(order, (0..10).collect::<Vec<_>>());
        let mut untouched: Vec<SampleId> = (0..10).collect();
        shuffle_windows(&mut untouched, 1, &mut PlanRng::new(1, 0, Purpose::Buffer));
        assert_eq!(untouched, (0..10).collect::<Vec<_>>());
    }
}
