//! Test fakes for kiln's seams.
//!
//! Each fake is a real, small implementation of a kiln-ml-core trait, good enough to drive the
//! other crates' tests without files, GPUs or models:
//!
//! - [`MemorySource`]: an in-memory [`BlockLayout`](kiln_ml_core::BlockLayout) and
//!   [`BlockSource`](kiln_ml_core::BlockSource), with failure injection per block;
//! - [`RecordingObserver`]: an [`Observer`](kiln_ml_core::Observer) that keeps every event;
//! - [`InOrderSampler`]: a [`Sampler`](kiln_ml_core::Sampler) that follows the layout order and
//!   shards by kiln's rule;
//! - [`MeanMetric`]: a sum/count [`Metric`](kiln_ml_core::Metric);
//! - `Mlp`, `MlpConfig`, `RegressionBatch` and `teacher_batches` (feature `train`): a small
//!   Burn regression model with seeded weights and data, and its `TrainStep`, shared by the
//!   trainer's tests and benches;
//! - `wgpu_device()` (feature `wgpu`): the Vulkan device of the GPU-style test tier, a skip
//!   or (with `KILN_REQUIRE_GPU=1`) a failure when there is none.
//!
//! ```
//! use kiln_ml_core::{BlockLayout, BlockSource, PlanRequest, Sampler};
//! use kiln_ml_testkit::{InOrderSampler, MemorySource};
//!
//! let source = MemorySource::with_ids(&[&[3, 2], &[4]]);
//! let plan = InOrderSampler::new(2).plan(&source, &PlanRequest::new(0, 0)).unwrap();
//! assert_eq!(plan.len() as u64, source.num_samples());
//! assert_eq!(source.read_block(1).unwrap(), vec![3, 4]);
//! ```

mod in_order_sampler;
mod mean_metric;
mod memory_source;
mod recording_observer;
#[cfg(feature = "train")]
mod regression;
#[cfg(feature = "wgpu")]
mod wgpu_device;

pub use in_order_sampler::InOrderSampler;
pub use mean_metric::MeanMetric;
pub use memory_source::{MemorySource, MemorySourceError};
pub use recording_observer::RecordingObserver;
#[cfg(feature = "train")]
pub use regression::{
    Mlp, MlpConfig, RegressionBatch, TEACHER_INPUTS, teacher_batches, teacher_rows,
};
#[cfg(feature = "wgpu")]
pub use wgpu_device::{REQUIRE_GPU, vulkan_adapter, wgpu_device};
