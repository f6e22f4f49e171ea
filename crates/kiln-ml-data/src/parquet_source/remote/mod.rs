//! Parquet files in object stores (S3 and S3-compatible stores, GCS, Azure, HTTP) through the
//! `object_store` crate: listing, footers and coalesced ranged reads, with retries.

mod fetch;
mod list;
mod store;

pub(crate) use fetch::{Lookup, RemoteObject, Tail, fetch_all_ends};
pub(crate) use list::list_objects;
pub(crate) use store::RemoteStore;
