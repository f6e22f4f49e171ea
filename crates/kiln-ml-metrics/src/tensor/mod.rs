//! The tensor path: batches as Burn tensors, measured on their device.

mod batch;
mod deferred;
mod locate;
mod measure;
mod metric_impl;
mod mode_errors;

pub use batch::TensorTrajectoryBatch;
pub use deferred::{DEFAULT_MAX_IN_FLIGHT, DeviceTrajectoryMetrics};
