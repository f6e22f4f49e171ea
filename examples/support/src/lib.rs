//! What kiln's examples share, so each example is a thin binary: the `--json` and `--device`
//! flags ([`cli`]), parity comparisons where a NaN shows ([`compare`]), the regression workload of the profiling examples ([`regressor`]), the
//! cached-batch diagnosis ([`cached_batch`]), the synthetic Parquet dataset and epoch timing
//! of the block-shuffle examples ([`shuffle_dataset`], [`timing`]), the writing of generated
//! Parquet files ([`parquet_file`]) with rows split over them ([`split_sizes`]), and a generated
//! dataset kept for later runs ([`dataset_dir`]).

pub mod cached_batch;
pub mod cli;
pub mod compare;
pub mod dataset_dir;
pub mod parquet_file;
pub mod regressor;
pub mod shuffle_dataset;
pub mod split_sizes;
pub mod timing;
