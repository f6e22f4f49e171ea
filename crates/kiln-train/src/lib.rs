//! A Burn training loop with automatic mixed precision, correct gradient accumulation,
//! global-norm clipping, observers and checkpoints that resume mid-epoch, bit for bit.
//!
//! [`Trainer`] works with any Burn `AutodiffBackend`, `AutodiffModule`, `Optimizer` and
//! `LrScheduler`, and any iterator of batches. The model implements [`TrainStep`] (forward and
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
//!   kiln-core [`Event::Step`](kiln_core::Event::Step).
//! - **Accumulation** over K micro-batches divides by the micro-batches actually in the
//!   window (or by item count), flushes the last partial window of an epoch with its own
//!   count, and steps the scheduler once per optimizer step.
//! - **Clipping** by global norm in f32 (PyTorch's formula) or by value, after unscaling.
//! - **Checkpoints** of model, optimizer, scheduler, loss scaler, RNG, data
//!   [`Position`](kiln_core::Position) and counters, written atomically.
//! - **Presets** ([`Preset`]) and **observers** (phase timing, [`ProgressObserver`]).
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
//! use kiln_train::{Autocast, StepOutput, TrainStep, Trainer, TrainerConfig};
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
//! impl<B: AutodiffBackend> TrainStep<B> for Regressor<B> {
//!     type Input = Batch<B>;
//!     type Output = ();
//!     fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
//!         let predictions = autocast.full(self.linear.forward(autocast.input(batch.inputs)));
//!         StepOutput::new(MseLoss::new().forward(predictions, batch.targets, Reduction::Mean), ())
//!     }
//!     fn batch_samples(&self, batch: &Batch<B>) -> u64 {
//!         batch.inputs.dims()[0] as u64
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
//! let mut trainer = Trainer::new(model, SgdConfig::new().init(), 0.5, config, device)?;
//! let summary = trainer.fit(|_position| batches.clone())?;
//! assert_eq!(summary.counters.optimizer_steps, 40); // 2 steps per epoch
//! assert!(summary.last_loss.unwrap() < 1e-2);
//! # Ok::<(), kiln_train::Error>(())
//! ```

mod checkpoint;
mod checkpoint_file;
mod clipping;
mod config;
mod counters;
mod error;
mod fit;
mod loss_scaler;
mod module_cast;
mod observers;
mod param_shapes;
mod precision;
mod precision_policy;
mod preset;
mod progress;
mod rng;
mod skip_monitor;
mod step;
mod train_step;
mod trainer;
mod validate;
mod window;

pub use checkpoint_file::{latest_checkpoint, list_checkpoints};
pub use clipping::{
    CLIP_NORM_EPS, GradientClipping, clip_coefficient, clip_grad_norm, global_grad_norm,
    scale_grads, squared_grad_norm,
};
pub use config::{CheckpointConfig, LossNormalization, TrainerConfig};
pub use counters::{BatchOutcome, Counters, FitSummary};
pub use error::{Error, Result};
pub use loss_scaler::{DynamicLossScaler, LossScalerConfig, LossScalerState};
pub use module_cast::{cast_module, materialize};
pub use precision::{Autocast, Precision};
pub use precision_policy::{NORM_LAYERS, PrecisionPolicy};
pub use preset::Preset;
pub use progress::ProgressObserver;
pub use rng::{RngState, step_seed};
pub use skip_monitor::{SkipMonitor, SkipWarning, SkipWarningConfig};
pub use step::{InferenceStep, StepOutput, TrainStep};
pub use trainer::Trainer;
pub use validate::{ValidInput, ValidOutput};
