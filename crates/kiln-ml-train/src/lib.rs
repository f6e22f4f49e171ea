//! A Burn training loop with automatic mixed precision, correct gradient accumulation,
//! global-norm clipping, observers and checkpoints that resume mid-epoch, bit for bit.
//!
//! [`Trainer`] works with any Burn `AutodiffBackend`, `AutodiffModule`, `Optimizer` and
//! `LrScheduler`, and any iterator of batches: [`fit`](Trainer::fit) saves the
//! [`Position`](kiln_ml_core::Position) the data reports ([`PositionedBatches`](kiln_ml_core::PositionedBatches)),
//! so resume is exact. The model implements [`TrainStep`] (forward and
//! loss; the trainer owns backward) and, for validation, its inner module implements
//! [`InferenceStep`]; both have the shape of Burn's traits of the same names.
//!
//! What it gets right that Burn 0.21, PyTorch and Lightning users trip over
//! (`docs/training.md` has the details):
//!
//! - **Mixed precision** ([`Precision`]): f32 master weights and optimizer state; forward and
//!   backward on an f16 or bf16 copy whose casts are in the autodiff graph, so gradients arrive
//!   in f32. f16 uses a [`DynamicLossScaler`] with PyTorch's defaults and semantics. A
//!   [`PrecisionPolicy`] keeps normalization layers, modules with running statistics and named
//!   modules in f32, so the master stays f32 throughout.
//! - **No host readback in f32 and bf16** by default (norm clipping runs on the device; the
//!   loss is read when asked for), **one in f16**: unscale, a single inf/NaN check, clip, then
//!   step or skip. A skipped step does not advance the LR scheduler; every outcome is a
//!   kiln-ml-core [`Event::Step`](kiln_ml_core::Event::Step).
//! - **Accumulation** over K micro-batches divides by the micro-batches actually in the
//!   window (or by item count), flushes the last partial window of an epoch with its own
//!   count, and steps the scheduler once per optimizer step.
//! - **Clipping** by global norm in f32 (PyTorch's formula) or by value, after unscaling.
//! - **Checkpoints** of model, optimizer, scheduler, loss scaler, RNG, data
//!   [`Position`](kiln_ml_core::Position) and counters, written atomically.
//! - **Presets** ([`Preset`]) and **observers** (phase timing, [`ProgressObserver`]).
//! - **Data parallelism** ([`DataParallel`], [`Trainer::join`]): one replica per device, one
//!   process per node ([`NodeConfig`], through burn-collective); gradients summed over all
//!   replicas and normalized by their total micro-batches, so N replicas at batch b match one
//!   device at N·b.
//!
//! # Example
//!
//! A linear regression trained with SGD on the flex CPU backend, two micro-batches per step:
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
//! use burn::optim::SgdConfig;
//! use burn::tensor::{Int, Tensor, backend::{AutodiffBackend, Backend}};
//! use kiln_ml_core::PlainBatches;
//! use kiln_ml_train::{Autocast, StepOutput, TrainStep, TrainerConfig};
//!
//! #[derive(Module, Debug)]
//! struct Regressor<B: Backend> {
//!     linear: Linear<B>,
//! }
//!
//! #[derive(Clone)]
//! struct Batch<B: Backend> {
//!     inputs: Tensor<B, 2>,
//!     targets: Tensor<B, 2>,
//! }
//!
//! impl<B: Backend> Batch<B> {
//!     fn len(&self) -> usize {
//!         self.inputs.dims()[0]
//!     }
//! }
//!
//! impl<B: AutodiffBackend> TrainStep<B> for Regressor<B> {
//!     type Input = Batch<B>;
//!     type Output = ();
//!     fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
//!         let predictions = autocast.full(self.linear.forward(autocast.input(batch.inputs)));
//!         StepOutput::new(MseLoss::new().forward(predictions, batch.targets, Reduction::Mean), ())
//!     }
//! }
//!
//! type B = Autodiff<Flex>;
//! let device = Default::default();
//! // y = 2 x: four batches of four points.
//! let batches: Vec<Batch<B>> = (0..4)
//!     .map(|i| {
//!         let x = Tensor::<B, 1, Int>::arange(i * 4..i * 4 + 4, &device).float().div_scalar(16.0);
//!         let inputs = x.reshape([4, 1]);
//!         Batch { targets: inputs.clone().mul_scalar(2.0), inputs }
//!     })
//!     .collect();
//!
//! let model = Regressor { linear: LinearConfig::new(1, 1).init(&device) };
//! let config = TrainerConfig::new().with_num_epochs(20).with_accumulation_steps(2);
//! let mut trainer = config.init(model, SgdConfig::new().init(), 0.5, device)?;
//! // Any iterator of batches, positioned by kiln: four samples per batch.
//! let summary = trainer.fit(|position| PlainBatches::new(batches.clone(), position, |b| b.len()))?;
//! assert_eq!(summary.counters.optimizer_steps, 40); // 2 steps per epoch
//! assert!(summary.last_loss.unwrap() < 1e-2);
//! # Ok::<(), kiln_ml_train::Error>(())
//! ```

mod agreement;
mod best_checkpoints;
mod buckets;
mod burn_adam_state;
mod callback;
mod callback_states;
mod checkpoint;
mod checkpoint_file;
mod clipping;
mod collective;
mod config;
mod counters;
mod data_parallel;
mod early_stopping;
mod ema;
mod ephemeral_ports;
mod epoch_summary;
mod error;
mod first_step;
mod fit;
mod fixed_order_sum;
mod flat_layout;
mod flat_step;
mod fused_adam;
mod fused_sgd;
mod grad_sync;
mod independent_copy;
mod join;
mod loggers;
mod loss_scaler;
mod lr_finder;
mod materialize;
mod model_step;
mod multi_grads;
mod node_config;
mod observers;
mod optimizer_step;
mod param_shapes;
mod precision;
mod precision_policy;
mod preset;
mod progress;
mod replica;
mod replica_group;
mod rng;
mod run_ahead;
mod skip_monitor;
mod step_hints;
mod tied_params;
mod train_batch;
mod trainer;
mod validation;
mod window;

pub use best_checkpoints::{BestCheckpoints, RankedCheckpoint};
pub use callback::{Callback, CheckpointWriter, Decision, EpochContext, EpochMetrics, Mode};
pub use checkpoint_file::{latest_checkpoint, list_checkpoints};
pub use clipping::{GradientClipping, clip_grad_norm, global_grad_norm};
pub use config::{CheckpointConfig, LossNormalization, TrainerConfig};
pub use counters::{BatchOutcome, Counters, FitSummary};
pub use data_parallel::DataParallel;
pub use early_stopping::EarlyStopping;
pub use ema::EmaConfig;
pub use epoch_summary::EpochSummary;
pub use error::{Error, Result};
pub use fixed_order_sum::fixed_order_sum;
pub use fused_adam::{AdamWeightDecay, FusedAdam, FusedAdamConfig, FusedAdamRecord};
pub use fused_sgd::{FusedSgd, FusedSgdConfig, FusedSgdRecord, SgdMomentum};
pub use independent_copy::independent_copy;
pub use loggers::{CsvLogger, LogRow, LogRows, Scalar, TensorBoardLogger, read_scalars};
pub use loss_scaler::{DynamicLossScaler, LossScalerConfig, LossScalerState};
pub use lr_finder::{LrFinder, LrFinding};
pub use materialize::materialize;
pub use model_step::{InferenceStep, StepOutput, TrainStep};
pub use node_config::NodeConfig;
pub use precision::{Autocast, Precision};
pub use precision_policy::{NORM_LAYERS, PrecisionPolicy};
pub use preset::Preset;
pub use progress::ProgressObserver;
pub use replica::Replica;
pub use skip_monitor::SkipWarningConfig;
pub use trainer::Trainer;
pub use validation::{ValidInput, ValidOutput};

/// The README's examples, compiled and run as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
