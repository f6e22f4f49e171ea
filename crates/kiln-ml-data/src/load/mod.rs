//! The prefetching loader that executes epoch plans.

mod burn_collate;
mod collate;
mod config;
mod coordinator;
mod epoch;
mod held_samples;
mod launch;
mod loader;
mod parts;
mod pool;
mod prefetch_depth;
mod reply;
mod residency;
mod schedule;
mod staged;
mod tensor_creation;

pub use burn_collate::BurnCollate;
pub use collate::{Collate, CollateFn, NoCollate, collate_fn};
pub use config::LoaderConfig;
pub use epoch::Epoch;
pub use loader::Loader;
pub use residency::LoaderResidency;
pub use staged::Staged;
pub use tensor_creation::TensorCreation;
