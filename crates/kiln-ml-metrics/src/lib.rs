//! Trajectory-forecasting metrics exactly as Argoverse 1 and 2, nuScenes and Waymo define them.
//!
//! ADE, FDE, minADE@K, minFDE@K, miss rate@K, brier-minADE/FDE, p-minADE/FDE, p-MR and, for
//! joint predictions, av2's actor miss rate, at several horizons and K values in one pass, as one
//! streaming [`TrajectoryMetrics`] state that implements kiln-ml-core's
//! [`Metric`](kiln_ml_core::Metric) seam: sum/count accumulators merge across threads, ranks and
//! devices (counts exactly, f64 sums up to rounding; one host pass is reproducible bit for bit
//! whatever the threads).
//!
//! - **Policies** ([`MetricsConfig`]): mode selection, miss rule, top-K pruning, mask handling,
//!   probability checks; presets [`argoverse1`](MetricsConfig::argoverse1),
//!   [`argoverse2`](MetricsConfig::argoverse2), [`nuscenes`](MetricsConfig::nuscenes) and
//!   [`waymo`](MetricsConfig::waymo) reproduce each benchmark's published definitions and test
//!   vectors (Argoverse 2's leaderboard script is not public: its preset follows the documented
//!   convention).
//! - **Two paths, one state**: host `f32` slices ([`TrajectoryBatch`], optionally on rayon's
//!   threads) and Burn tensors on any backend, reduced on the device.
//! - **Errors, not panics**: bad shapes, K = 0, NaN or infinite values and probabilities the
//!   policy rejects come back as an [`Error`] naming the field, agent and position.
//! - **Waymo's mAP, soft mAP and overlap rate** on host batches that carry each agent's
//!   [`TrajectoryType`] (Waymo's `ClassifyTrack`, [`TrajectoryType::of_track`]) and the
//!   [`SceneBoxes`] of the objects around it.
//! - `per_mode`: av2-style per-hypothesis building blocks; `precision_recall`: Waymo's PR curve
//!   and average precision for given (confidence, true positive) samples.
//! - Feature `burn-train`: `BurnTrajectoryMetric` implements burn-train's `Metric` and
//!   `Numeric`, so the metrics appear on the dashboard of Burn's `Learner`.
//!
//! # Example
//!
//! ```
//! use kiln_ml_core::Metric;
//! use kiln_ml_metrics::{BatchShape, MetricsConfig, TrajectoryBatch};
//!
//! // Two agents, one mode, two steps: the first forecast is exact, the second ends 3 m off.
//! let truth = [0.0, 0.0, 1.0, 0.0, /* agent 1 */ 0.0, 0.0, 0.0, 1.0];
//! let predictions = [0.0, 0.0, 1.0, 0.0, /* agent 1 */ 0.0, 0.0, 0.0, 4.0];
//! let batch = TrajectoryBatch::new(BatchShape::new(2, 1, 2), &predictions, &truth)?;
//!
//! let mut metrics = MetricsConfig::argoverse2().init()?;
//! metrics.update(&batch)?;
//! let report = metrics.compute();
//! assert_eq!(report.at(6).unwrap().min_fde, Some(1.5));
//! assert_eq!(report.at(6).unwrap().miss_rate, Some(0.5));
//! # Ok::<(), kiln_ml_metrics::Error>(())
//! ```

mod batch;
#[cfg(feature = "burn-train")]
mod burn_train;
#[cfg(feature = "burn-train")]
mod burn_train_batch;
mod confidence_order;
mod config;
mod error;
mod host;
mod input_checks;
mod match_samples;
mod metric;
mod mode_errors;
mod oriented_box;
mod overlap;
pub mod per_mode;
mod policy;
pub mod precision_recall;
mod precision_sums;
mod presets;
mod report;
mod scene_boxes;
mod selection;
mod sums;
mod tensor;
mod trajectory_type;

pub use batch::{BatchShape, TrajectoryBatch};
#[cfg(feature = "burn-train")]
pub use burn_train::{BurnTrajectoryMetric, ReportedValue, TrajectoryMetricInput};
pub use config::{Horizon, MetricsConfig, MissBox};
pub use error::{Error, Result};
pub use host::Parallelism;
pub use metric::TrajectoryMetrics;
pub use policy::{
    FinalStep, MissRule, ModeSelection, ProbabilityCheck, ProbabilityPolicy, Pruning, SpeedScaling,
    TieOrder, ZeroMass,
};
pub use precision_sums::{MatchOutcome, MatchSample, PrecisionBucket, PrecisionSums};
pub use report::{HorizonReport, MetricReport, TopKReport};
pub use scene_boxes::{BOX_VALUES, SceneBoxes};
pub use sums::{HorizonSums, Mean, MetricSums, TopKSums};
pub use tensor::{DEFAULT_MAX_IN_FLIGHT, DeviceTrajectoryMetrics, TensorTrajectoryBatch};
pub use trajectory_type::{TRAJECTORY_TYPES, TrackState, TrajectoryType};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
