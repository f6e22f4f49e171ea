//! The small shared traits of kiln.
//!
//! kiln's crates compose only through the seams defined here, the way ripgrep's searcher and
//! printer meet only through `grep-matcher`:
//!
//! | seam | implemented by | used by |
//! |---|---|---|
//! | [`BlockLayout`] (with [`Layout`]) | `kiln-ml-data`'s Parquet source, caches | samplers |
//! | [`Sampler`] → [`Plan`] | `kiln-ml-sampler` | `kiln-ml-data`'s loader |
//! | [`BlockSource`] | `kiln-ml-data`'s Parquet source, `kiln-ml-cache`'s caches | the loader |
//! | [`Transform`] | user preprocessing | `kiln-ml-cache` (it caches the transform's output) |
//! | [`PositionedBatches`] → [`Position`] | `kiln-ml-data`'s epochs, [`PlainBatches`] | the trainer's `fit` and checkpoints |
//! | [`Metric`] | `kiln-ml-metrics` | the trainer's validation, user code |
//! | [`Observer`] ← [`Event`] | `kiln-ml-train`'s progress bar, user loggers | the trainer, the loader |
//!
//! The crate depends on neither Burn nor Arrow, so every kiln crate can share it cheaply.
//!
//! # Example
//!
//! A layout of two files, a plan over it, and the resume state after part of the plan:
//!
//! ```
//! use kiln_ml_core::{BlockLayout, Fingerprint, Layout, Plan, PlanRequest, Position, Result, Sampler};
//!
//! /// Visits the blocks last-to-first, each block in row order.
//! struct BlocksReversed;
//!
//! impl Sampler for BlocksReversed {
//!     fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
//!         let order = layout.blocks().iter().rev().flat_map(|block| block.samples()).collect();
//!         Plan::new(request.epoch, request.shard, 1, order, layout)
//!     }
//! }
//!
//! let mut builder = Layout::builder();
//! builder.add_file(Fingerprint::of_bytes(b"a.parquet"), &[3, 2]);
//! builder.add_file(Fingerprint::of_bytes(b"b.parquet"), &[4]);
//! let layout = builder.build()?;
//!
//! let request = PlanRequest::new(42, 0);
//! let plan = BlocksReversed.plan(&layout, &request)?;
//! assert_eq!(plan.order(), &[5, 6, 7, 8, 3, 4, 0, 1, 2]);
//!
//! let position = plan.position_after(4)?;
//! assert_eq!(position, Position { epoch: 0, consumed: 4 });
//! let resumed = BlocksReversed.resume(&layout, &request, position)?;
//! assert_eq!(resumed.order(), &plan.order()[4..]);
//! # Ok::<(), kiln_ml_core::Error>(())
//! ```

mod atomic_write;
mod autotune;
mod block_finder;
mod data_key;
mod error;
mod event;
mod fingerprint;
mod kernel_log;
mod layout;
mod metric;
mod observer;
mod panic_message;
mod plan;
mod position;
mod positioned;
mod read_error;
mod sampler;
mod shard;
mod source;
mod transform;

pub use atomic_write::{Durability, WriteError, create_dir_all_synced, write_atomic};
pub use autotune::AutotuneLevel;
pub use block_finder::BlockFinder;
pub use data_key::{ResumePoint, data_key};
pub use error::{Error, Result};
pub use event::{Event, Phase, SkipReason, StepOutcome, StepReport};
pub use fingerprint::{Fingerprint, FingerprintBuilder, ParseFingerprintError};
pub use kernel_log::{kernel_log, set_kernel_log};
pub use layout::{
    Block, BlockIndex, BlockLayout, FileId, Layout, LayoutBuilder, SampleId, validate_layout,
};
pub use metric::Metric;
pub use observer::{NoObserver, Observer, Timing};
pub use panic_message::panic_message;
pub use plan::{BlockUse, Plan};
pub use position::Position;
pub use positioned::{PlainBatches, PositionedBatches};
pub use read_error::{BoxError, ReadError};
pub use sampler::Sampler;
pub use shard::{PlanRequest, Shard};
pub use source::BlockSource;
pub use transform::{FnTransform, Transform, transform_fn};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
