//! The file-aware block shuffle: configuration, global order and the interleave behind it.

mod config;
mod fenwick;
mod interleave;
mod order;
mod weights;

pub use config::BlockShuffleConfig;
pub use order::{BlockShuffleOrder, BlockShuffleSampler};
