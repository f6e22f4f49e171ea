//! The file-aware block shuffle: configuration, sampler and the interleave behind it.

mod config;
mod interleave;
mod sampler;
mod weights;

pub use config::BlockShuffleConfig;
pub use sampler::BlockShuffleSampler;
