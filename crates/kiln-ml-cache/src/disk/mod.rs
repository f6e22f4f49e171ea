//! The on-disk segment store: atomic writes, verified reads (memory-mapped for large segments),
//! LRU size limit.

mod index;
mod read;
mod store;
mod write;

pub use store::{DEFAULT_MMAP_THRESHOLD, DiskCache};
