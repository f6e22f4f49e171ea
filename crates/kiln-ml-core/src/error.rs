//! The error type shared by kiln-ml-core's value types and the `Sampler` seam.

/// A `Result` whose error is kiln-ml-core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while building a layout, a shard or a plan, or while resuming one.
///
/// Every variant names the offending value so the message can be acted on without a debugger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A layout has no samples at all.
    #[error("the layout is empty: it has no samples")]
    EmptyLayout,
    /// A layout's blocks do not tile the sample ids `0..n` in order.
    #[error("invalid layout at block {block}: {reason}")]
    InvalidLayout {
        /// Index of the first offending block.
        block: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A shard whose rank is not below its world size, or a world size of zero.
    #[error("invalid shard: rank {rank} of world size {world} (need world >= 1 and rank < world)")]
    InvalidShard {
        /// The rank asked for.
        rank: u32,
        /// The world size asked for.
        world: u32,
    },
    /// A batch size of zero.
    #[error("the batch size must be at least 1")]
    ZeroBatchSize,
    /// More ranks than there are samples to give them.
    #[error("{world} ranks cannot share {samples} samples: every rank needs at least one batch")]
    TooFewSamples {
        /// Number of samples in the layout.
        samples: u64,
        /// World size asked for.
        world: u32,
    },
    /// A resume position that does not belong to the plan it is applied to.
    #[error("cannot resume epoch {plan_epoch} at {position}: {reason}")]
    InvalidPosition {
        /// The position asked for.
        position: crate::Position,
        /// The epoch of the plan.
        plan_epoch: u64,
        /// Why it does not fit.
        reason: String,
    },
    /// A sampler or other component was configured with an impossible value.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}
