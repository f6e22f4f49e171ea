//! Configuration of the block shuffle: open blocks, shuffle buffer, stratification, sharding.

use std::sync::Arc;

use kiln_ml_core::{Error, Result};

use super::order::{BlockShuffleOrder, BlockShuffleSampler};
use crate::sharded::Sharded;
use crate::sharding::{RemainderPolicy, Sharding};
use crate::size_budget::{SizeBudget, SizeBudgetSampler};

/// Configuration of a [`BlockShuffleSampler`]: how many blocks are open at once (K), how many
/// samples the shuffle buffer holds (S), whether block order is stratified, and the sharding.
///
/// Serde-friendly (missing fields take their defaults, unknown fields are rejected) and
/// checked by [`validate`](Self::validate) / [`init`](Self::init).
///
/// # Defaults
///
/// | field | default | why |
/// |---|---|---|
/// | `open_blocks` (K) | 192 | meets kiln's quality targets for 660 files / 900K samples / batch 64 with ≤ 1,024-row blocks: 0.90× ideal distinct files per batch, 3× the ideal same-file pair rate (docs/performance.md) |
/// | `buffer_samples` (S) | 16,384 | breaks up the row order inside each block over short stretches, for about 2·S more rows held by the loader |
/// | `stratified` | `true` | every stretch of the epoch mixes all parts of the layout: \|Spearman\| ≤ 0.003 where a plain block permutation gives up to 0.09 (ten seeds), and better batch mixing |
/// | `sharding` | batch 1, [`RemainderPolicy::Drop`] | on one rank, every sample exactly once |
///
/// # Memory cost
///
/// - **Planning:** 8 bytes per sample for the order (the plan itself), plus O(blocks); the buffer
///   windows are shuffled in place, so S costs nothing extra.
/// - **Loading:** a loader that reads each block at its first use and frees it after its last use
///   holds about `K × rows_per_block + 2 × S` samples at the peak: the K blocks being read, and
///   the blocks whose samples still wait in the current buffer window. Use
///   [`quality::residency`](crate::quality::residency) to measure it exactly for a plan. Lower K
///   for large row groups (K × 128K-row groups is a lot of memory); raise it for better mixing.
///
/// ```
/// use kiln_ml_sampler::{BlockShuffleConfig, RemainderPolicy};
///
/// let sampler = BlockShuffleConfig::default()
///     .with_open_blocks(64)
///     .with_buffer_samples(16_384)
///     .with_batch_size(32)
///     .with_remainder(RemainderPolicy::Pad)
///     .init()?;
/// assert_eq!(sampler.config().open_blocks, 64);
/// assert!(BlockShuffleConfig::default().with_open_blocks(0).init().is_err());
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockShuffleConfig {
    /// K: blocks read at the same time, interleaved sample by sample. At least 1; 1 with no
    /// buffer is a pure block (file) shuffle.
    pub open_blocks: usize,
    /// S: samples per shuffle-buffer window. The interleaved stream is cut into windows of about
    /// S samples (sizes balanced so the last window is not tiny) and each window is shuffled.
    /// 0 or 1 means no buffer.
    pub buffer_samples: usize,
    /// Whether the block order is stratified: lane `i` of the K lanes reads the `i`-th
    /// contiguous part of the layout in a random order. When `false`, all blocks are taken in one
    /// Fisher-Yates order by whichever lane frees up first.
    pub stratified: bool,
    /// Per-rank batch size and remainder policy.
    pub sharding: Sharding,
}

impl Default for BlockShuffleConfig {
    fn default() -> Self {
        Self {
            open_blocks: Self::DEFAULT_OPEN_BLOCKS,
            buffer_samples: Self::DEFAULT_BUFFER_SAMPLES,
            stratified: true,
            sharding: Sharding::default(),
        }
    }
}

impl BlockShuffleConfig {
    /// Default K (see the table above).
    pub const DEFAULT_OPEN_BLOCKS: usize = 192;
    /// Default S (see the table above).
    pub const DEFAULT_BUFFER_SAMPLES: usize = 16_384;

    /// The default configuration; same as [`Default::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A pure block shuffle: one block open, no buffer. Blocks come in a Fisher-Yates order and
    /// each is read whole; the cheapest shuffle and the weakest mixing.
    pub fn block_order_only() -> Self {
        Self {
            open_blocks: 1,
            buffer_samples: 0,
            stratified: false,
            sharding: Sharding::default(),
        }
    }

    /// Sets K, the number of blocks open at once.
    pub fn with_open_blocks(self, open_blocks: usize) -> Self {
        Self {
            open_blocks,
            ..self
        }
    }

    /// Sets S, the shuffle-buffer window in samples (0 or 1: no buffer).
    pub fn with_buffer_samples(self, buffer_samples: usize) -> Self {
        Self {
            buffer_samples,
            ..self
        }
    }

    /// Turns the stratified block order on or off.
    pub fn with_stratified(self, stratified: bool) -> Self {
        Self { stratified, ..self }
    }

    /// Sets the whole sharding configuration.
    pub fn with_sharding(self, sharding: Sharding) -> Self {
        Self { sharding, ..self }
    }

    /// Sets the per-rank batch size.
    pub fn with_batch_size(self, batch_size: u64) -> Self {
        Self {
            sharding: Sharding {
                batch_size,
                ..self.sharding
            },
            ..self
        }
    }

    /// Sets the remainder policy.
    pub fn with_remainder(self, remainder: RemainderPolicy) -> Self {
        Self {
            sharding: Sharding {
                remainder,
                ..self.sharding
            },
            ..self
        }
    }

    /// Checks every field, naming the first that is out of range.
    pub fn validate(&self) -> Result<()> {
        if self.open_blocks == 0 {
            return Err(Error::InvalidConfig(
                "block shuffle: open_blocks must be at least 1, got 0".to_owned(),
            ));
        }
        self.sharding.validate()
    }

    /// Validates the configuration and builds the sampler.
    pub fn init(self) -> Result<BlockShuffleSampler> {
        self.validate()?;
        Ok(Sharded::wrap(self.order(), self.sharding))
    }

    /// The length-aware block shuffle: this block shuffle's order cut into batches of at most
    /// `budget` elements (`rows × longest` when `padded`, else the sum of sizes), grouped by
    /// length within each window of [`buffer_samples`](Self::buffer_samples) (the samples the
    /// open blocks have in flight, so reads stay as sequential as the plain block shuffle's),
    /// the batches of each window shuffled. `sizes[sample]` is each sample's size; the
    /// sharding's batch size is not used (the budget cuts the batches), its remainder policy is.
    ///
    /// ```
    /// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
    /// use kiln_ml_sampler::BlockShuffleConfig;
    ///
    /// let mut builder = Layout::builder();
    /// for file in 0..8u64 {
    ///     builder.add_file(Fingerprint::builder().u64(file).finish(), &[50, 50]);
    /// }
    /// let layout = builder.build()?;
    /// let sizes: Vec<u64> = (0..800).map(|sample| 1 + sample * 37 % 100).collect();
    /// let sampler = BlockShuffleConfig::default()
    ///     .with_open_blocks(4)
    ///     .with_buffer_samples(200)
    ///     .length_aware(1_000, true, sizes.clone())?;
    /// let plan = sampler.plan(&layout, &PlanRequest::new(3, 0))?;
    /// for batch in 0..plan.batch_count() {
    ///     let range = plan.batch_range(batch);
    ///     let samples = &plan.order()[range.start as usize..range.end as usize];
    ///     let longest = samples.iter().map(|&s| sizes[s as usize]).max().unwrap();
    ///     assert!(samples.len() as u64 * longest <= 1_000);
    /// }
    /// # Ok::<(), kiln_ml_sampler::Error>(())
    /// ```
    pub fn length_aware(
        self,
        budget: u64,
        padded: bool,
        sizes: impl Into<Arc<[u64]>>,
    ) -> Result<SizeBudgetSampler<BlockShuffleOrder>> {
        self.validate()?;
        let budget = SizeBudget {
            budget,
            padded,
            window: self.buffer_samples,
        };
        SizeBudgetSampler::new(self.order(), budget, sizes, self.sharding.remainder)
    }

    /// The global order this configuration describes (K, S, stratification), unchecked.
    fn order(&self) -> BlockShuffleOrder {
        BlockShuffleOrder {
            open_blocks: self.open_blocks,
            buffer_samples: self.buffer_samples,
            stratified: self.stratified,
        }
    }
}

// The sampler's constructors sit beside its configuration so that the order (order.rs) needs
// nothing from this file.
impl BlockShuffleSampler {
    /// A block shuffle with this configuration, after [validating](BlockShuffleConfig::validate)
    /// it; the same as [`BlockShuffleConfig::init`]. [`Default`] uses
    /// [`BlockShuffleConfig::default`].
    pub fn new(config: BlockShuffleConfig) -> Result<Self> {
        config.init()
    }

    /// The configuration: the order's K, S and stratification with the sharding.
    pub fn config(&self) -> BlockShuffleConfig {
        let order = self.order();
        BlockShuffleConfig {
            open_blocks: order.open_blocks,
            buffer_samples: order.buffer_samples,
            stratified: order.stratified,
            sharding: self.sharding(),
        }
    }
}

impl Default for BlockShuffleOrder {
    /// [`BlockShuffleConfig::default`]'s order: K = 192, S = 16,384, stratified.
    fn default() -> Self {
        BlockShuffleConfig::default().order()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_fills_defaults_and_rejects_unknown_fields() {
        let config: BlockShuffleConfig =
            serde_json::from_str(r#"{"open_blocks": 8, "sharding": {"batch_size": 4}}"#).unwrap();
        assert_eq!(config.open_blocks, 8);
        assert_eq!(
            config.buffer_samples,
            BlockShuffleConfig::DEFAULT_BUFFER_SAMPLES
        );
        assert_eq!(config.sharding, Sharding::new(4, RemainderPolicy::Drop));
        let error = serde_json::from_str::<BlockShuffleConfig>(r#"{"open_block": 8}"#).unwrap_err();
        assert!(error.to_string().contains("open_block"), "{error}");
        let text = serde_json::to_string(&BlockShuffleConfig::default()).unwrap();
        assert_eq!(
            serde_json::from_str::<BlockShuffleConfig>(&text).unwrap(),
            BlockShuffleConfig::default()
        );
    }

    #[test]
    fn validation_names_the_field() {
        let error = BlockShuffleConfig::new()
            .with_open_blocks(0)
            .validate()
            .unwrap_err();
        assert!(error.to_string().contains("open_blocks"), "{error}");
        let error = BlockShuffleConfig::new()
            .with_batch_size(0)
            .validate()
            .unwrap_err();
        assert_eq!(error, Error::ZeroBatchSize);
        assert!(BlockShuffleConfig::block_order_only().validate().is_ok());
    }

    #[test]
    fn the_sampler_gives_back_its_configuration() {
        let config = BlockShuffleConfig::block_order_only()
            .with_batch_size(8)
            .with_remainder(RemainderPolicy::Pad);
        assert_eq!(config.init().unwrap().config(), config);
        assert_eq!(
            BlockShuffleSampler::default().config(),
            BlockShuffleConfig::default()
        );
    }
}
