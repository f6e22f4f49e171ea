//! Parquet files as a block layout and block source.

mod columns;
mod decode;
mod discover;
mod file;
mod projection;
mod range_reader;
mod source;

pub use columns::{column, primitive, reject_nulls, required_values};
pub use decode::{ArrowRows, DecodeError, FnDecoder, RowDecoder, decoder_fn};
pub use source::{ParquetSource, ParquetSourceBuilder};
