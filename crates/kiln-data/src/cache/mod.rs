//! The preprocessing cache: verified on-disk segments, a RAM tier and the `Cached` wrapper.

mod cached;
mod codec;
mod disk;
mod ram;
mod segment;
mod stats;
mod warm;

pub use cached::Cached;
pub use codec::{BincodeCodec, Codec, CodecError, PodCodec};
pub use disk::{DEFAULT_MMAP_THRESHOLD, DiskCache};
pub use ram::RamCache;
pub use segment::{FORMAT_VERSION, Segment, SegmentBuilder, SegmentKey};
pub use stats::{CacheStats, CorruptSegment};
pub use warm::WarmReport;
