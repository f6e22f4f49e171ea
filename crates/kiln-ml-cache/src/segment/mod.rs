//! The cache segment: its byte format, key, builder, bytes and verification.

mod builder;
mod bytes;
pub(crate) mod format;
mod key;
mod verified;
mod verify;

pub use builder::SegmentBuilder;
pub(crate) use bytes::SegmentBytes;
pub use format::FORMAT_VERSION;
pub use key::SegmentKey;
pub(crate) use key::{SegmentName, file_name, is_segment_temporary};
pub use verified::Segment;
