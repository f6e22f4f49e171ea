//! Epoch plans over data that lives in many files: file-aware block shuffle, rank sharding,
//! exact resume and shuffle-quality measures.
//!
//! Every sampler here implements kiln-ml-core's [`Sampler`]: a pure function from a
//! [`BlockLayout`] and a [`PlanRequest`] (seed, epoch, rank of world) to a [`Plan`] that
//! `kiln-ml-data`'s loader executes.
//!
//! | sampler | order | reads | use |
//! |---|---|---|---|
//! | [`SequentialSampler`] | layout order | sequential | evaluation, speed reference |
//! | [`RandomSampler`] | uniform permutation | random (every block, all epoch) | quality reference, data in RAM |
//! | [`BlockShuffleSampler`] | blocks permuted, K interleaved, shuffled in windows of S | sequential per block | training |
//! | [`BlockShuffleConfig::length_aware`] | the block shuffle, each window grouped by size into size-budget batches, shuffled | sequential per block | variable-size samples |
//!
//! [`SizeBudgetSampler`] cuts any order into batches by a budget of elements (the sum of the
//! samples' sizes, or `rows × longest` padded) instead of a count; its plans carry their batch
//! ends ([`Plan::with_batch_ends`]) and shard, resume and key exactly as fixed-count ones.
//!
//! Each is one [`GlobalOrder`] ([`SequentialOrder`], [`RandomOrder`], [`BlockShuffleOrder`]: the
//! epoch's order over all samples) wrapped in [`Sharded`], which shards it over ranks. Wrap an
//! order of your own the same way to get the same sharding, remainder policies and resume.
//!
//! # Determinism
//!
//! A plan depends only on the layout's blocks (which its fingerprint identifies), the seed, the
//! epoch, the shard and the sampler's configuration: never on worker count, timing or platform.
//! All randomness comes from ChaCha8 keyed with `b"kiln-sampler/v1\0" ‖ seed ‖ epoch`
//! (little-endian `u64`s), one ChaCha stream per purpose (permutation, block order,
//! interleave, buffer, padding, Monte Carlo quality estimates, size-budget batches); integer ranges use Lemire's unbiased method and shuffles are Fisher-Yates, both
//! implemented here so that a `rand` upgrade cannot change plans. Pinned-value tests guard it.
//!
//! # Sharding and resume
//!
//! The global order of an epoch never depends on the world size. [`Sharded`] checks a request,
//! builds the order, and its [`Sharding`] cuts the order into global batches of
//! `batch_size × world` and gives rank `r` the `r`-th run of `batch_size` of each (kiln-ml-core's
//! rule, see [`Plan`]); a [`RemainderPolicy`] says what happens to the last,
//! partial global batch. [`Sampler::resume`]
//! regenerates the plan and skips the consumed prefix, so the rest is exactly what an
//! uninterrupted run would emit; resuming on another world size is exact when the new global
//! batch divides the consumed count (keep `batch_size × world` constant).
//!
//! # Example
//!
//! ```
//! use kiln_ml_core::{BlockLayout, Fingerprint, Layout, PlanRequest, Position, Sampler, Shard};
//! use kiln_ml_sampler::{BlockShuffleConfig, RemainderPolicy, quality};
//!
//! // 40 files of 300 rows, each in two row groups.
//! let mut builder = Layout::builder();
//! for file in 0..40u64 {
//!     builder.add_file(Fingerprint::builder().u64(file).finish(), &[200, 100]);
//! }
//! let layout = builder.build()?;
//!
//! // Two ranks, 16 samples each per step.
//! let sampler = BlockShuffleConfig::default()
//!     .with_open_blocks(16)
//!     .with_buffer_samples(2048)
//!     .with_batch_size(16)
//!     .with_remainder(RemainderPolicy::Drop)
//!     .init()?;
//! let request = PlanRequest::new(42, 0).with_shard(Shard::new(1, 2)?);
//! let plan = sampler.plan(&layout, &request)?;
//! assert_eq!(plan.len(), 6000); // 375 global batches of 32, half of each
//!
//! // Save after 10 local batches, resume: the rest is identical.
//! let position = plan.position_after(160)?;
//! assert_eq!(position, Position { epoch: 0, consumed: 320 });
//! let resumed = sampler.resume(&layout, &request, position)?;
//! assert_eq!(resumed.order(), &plan.order()[160..]);
//!
//! // How well does one rank's order mix files, next to a uniform shuffle?
//! let report = quality::measure(&layout, plan.order(), &quality::QualityOptions::new(16))?;
//! assert!(report.whole.distinct_ratio() > 0.5);
//! # Ok::<(), kiln_ml_sampler::Error>(())
//! ```

mod block_shuffle;
mod order;
mod permutation;
pub mod quality;
mod random;
mod rng;
mod sequential;
mod sharded;
mod sharding;
mod size_budget;
#[cfg(test)]
mod test_orders;
mod windows;

pub use block_shuffle::{BlockShuffleConfig, BlockShuffleOrder, BlockShuffleSampler};
/// The crate's error: kiln-ml-core's, since every sampler answers through the
/// [`Sampler`] seam.
pub use kiln_ml_core::Error;
/// A `Result` with the crate's [`Error`].
pub use kiln_ml_core::Result;
/// kiln-ml-core's vocabulary of layouts, requests and plans, so that this crate alone is enough
/// to describe data and read a plan.
pub use kiln_ml_core::{
    Block, BlockIndex, BlockLayout, FileId, Fingerprint, Layout, LayoutBuilder, Plan, PlanRequest,
    Position, SampleId, Sampler, Shard,
};
pub use order::GlobalOrder;
pub use random::{RandomOrder, RandomSampler};
pub use sequential::{SequentialOrder, SequentialSampler};
pub use sharded::Sharded;
pub use sharding::{RemainderPolicy, Sharding};
pub use size_budget::{BudgetBatches, SizeBudget, SizeBudgetSampler};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
