//! Parquet files, local or in object stores, as a block layout and block source.

mod arrow_row;
mod change_stamp;
mod codec;
mod columns;
mod conform;
mod decode;
mod discover;
mod file;
mod footer;
mod input;
mod integrity;
mod partition;
mod projection;
mod range_reader;
#[cfg(feature = "remote")]
mod remote;
mod retry_policy;
mod row_major;
mod sample_sizes;
mod schema_depth;
mod scheme;
mod sizes_file;
mod source;
mod source_schema;
mod unify;
mod url_input;
mod walk;

pub(crate) use arrow_row::Chunk;
pub use arrow_row::{ArrowRow, ArrowRows};
pub use columns::{column, primitive, reject_nulls, required_values};
pub(crate) use columns::{named, required_values_of};
pub use decode::{DecodeError, FnDecoder, RowDecoder, decoder_fn};
pub use retry_policy::RetryPolicy;
pub(crate) use row_major::{RowMajor, gather_staged};
pub use source::{ParquetSource, ParquetSourceBuilder};
