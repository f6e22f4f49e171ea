//! Size-budget batches: an order cut into batches by the sum of their samples' sizes (or their
//! padded size) instead of a fixed count, optionally grouped by length within windows.
//!
//! Samples of different sizes (pulses per event, nodes per graph) make a fixed-count batch's
//! memory and time follow its largest sample. Cut by a budget of elements, every batch costs
//! about the same; grouped by length inside a window of the order (the samples a block shuffle
//! already holds in flight), a padded batch wastes little. The batches of a window are then
//! shuffled, so long and short batches alternate. Every sample of the order stays, exactly once.

mod budget;
mod sampler;
mod sharding;

pub(crate) use budget::sample_size;
pub use budget::{BudgetBatches, SizeBudget};
pub use sampler::SizeBudgetSampler;
