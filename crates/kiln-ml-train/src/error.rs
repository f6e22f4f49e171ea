//! The one error type of kiln-ml-train.

use std::path::PathBuf;

/// A `Result` whose error is kiln-ml-train's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong while configuring, training, validating, checkpointing or resuming.
///
/// Every variant names where it happened: the optimizer step, the epoch and batch, the file or
/// the configuration field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of range or contradicts another one.
    #[error("invalid trainer configuration: `{field}` = {value}: {reason}")]
    InvalidConfig {
        /// The offending field, as spelled in [`TrainerConfig`](crate::TrainerConfig).
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// What is allowed instead.
        reason: String,
    },
    /// The model holds one parameter in two places (a module cloned into two fields): tied
    /// weights, which kiln's gradient passes would count once per place.
    #[error(
        "the model holds parameter {id} twice (places {first} and {second} in visiting order: a module or `Param` cloned into two fields shares its id); kiln would scale and count its gradient once per place. Build each place with its own `init`, or tie weights by calling one module twice in `forward`"
    )]
    TiedParameters {
        /// The parameter's id.
        id: String,
        /// Its first place among the model's parameters, in visiting order.
        first: usize,
        /// Its second place.
        second: usize,
    },
    /// The device cannot run the requested precision.
    #[error(
        "precision {precision} needs {dtype} tensors, which device {device} (backend {backend}) does not support; use another precision or device"
    )]
    UnsupportedPrecision {
        /// The precision asked for.
        precision: crate::Precision,
        /// The low-precision dtype it needs.
        dtype: String,
        /// The backend's name.
        backend: String,
        /// The device, as Burn prints it.
        device: String,
    },
    /// The forward pass of a mixed-precision step panicked (Burn panics on mixed dtypes).
    #[error(
        "optimizer step {step}, micro-batch {micro_batch}: the forward pass panicked under {precision}: {message}. \
         If this is a dtype mismatch, a layer kept in f32 by the precision policy (normalization layers, \
         modules with running statistics, the names in `precision_policy.keep_f32`) received a \
         low-precision input: call it through `autocast.keep_f32(x, |x| layer.forward(x))`, or cast \
         inputs with `autocast.input` and outputs with `autocast.full`"
    )]
    ForwardPanicked {
        /// The optimizer step.
        step: u64,
        /// The micro-batch within its window.
        micro_batch: u32,
        /// The precision the step ran in.
        precision: crate::Precision,
        /// The panic's message.
        message: String,
    },
    /// The step function returned a loss that is not a single value.
    #[error(
        "optimizer step {step}, micro-batch {micro_batch}: the loss must hold exactly one value, got shape {shape:?}"
    )]
    LossShape {
        /// The optimizer step being accumulated (counted from 1).
        step: u64,
        /// Index of the micro-batch inside the step's window (from 0).
        micro_batch: u32,
        /// The loss tensor's shape.
        shape: Vec<usize>,
    },
    /// Loss normalization by items needs every step output to report its item count.
    #[error(
        "optimizer step {step}, micro-batch {micro_batch}: loss normalization `items` needs StepOutput::with_items, but no item count was given"
    )]
    MissingItemCount {
        /// The optimizer step being accumulated (counted from 1).
        step: u64,
        /// Index of the micro-batch inside the step's window (from 0).
        micro_batch: u32,
    },
    /// Loss normalization by items found a window without a single item.
    #[error(
        "optimizer step {step}: loss normalization `items` found 0 items in the step's {micro_batches} micro-batches"
    )]
    NoItems {
        /// The optimizer step (counted from 1).
        step: u64,
        /// Micro-batches in the window.
        micro_batches: u32,
    },
    /// Anomaly detection (the `debug` preset) found a loss that is NaN or infinite.
    #[error(
        "non-finite loss {value} at optimizer step {step} (epoch {epoch}, micro-batch {micro_batch} of the step)"
    )]
    NonFiniteLoss {
        /// The optimizer step being accumulated (counted from 1).
        step: u64,
        /// The epoch (from 0).
        epoch: u64,
        /// Index of the micro-batch inside the step's window (from 0).
        micro_batch: u32,
        /// The loss value read back from the device.
        value: f64,
    },
    /// Anomaly detection found NaN or infinite gradients with no loss scaler to absorb them.
    #[error(
        "non-finite gradients at optimizer step {step} (epoch {epoch}): squared global norm is {squared_norm}"
    )]
    NonFiniteGradients {
        /// The optimizer step (counted from 1).
        step: u64,
        /// The epoch (from 0).
        epoch: u64,
        /// The squared global norm read back (NaN or infinite).
        squared_norm: f64,
    },
    /// Reading a value back from the device, or synchronizing it, failed.
    #[error("device error during {during}: {message}")]
    Device {
        /// What the trainer was doing.
        during: &'static str,
        /// The backend's message.
        message: String,
    },
    /// A collective operation between data-parallel replicas failed (a peer left, its shapes
    /// differ, or the network between nodes broke).
    #[error("data parallel, rank {rank} of {world}: {during} failed: {message}")]
    Collective {
        /// This replica's global rank.
        rank: u32,
        /// The number of replicas.
        world: u32,
        /// What the replica was doing.
        during: &'static str,
        /// burn-collective's error.
        message: String,
    },
    /// The data-parallel setup is incomplete or contradicts itself.
    #[error("invalid data-parallel setup: {reason}")]
    InvalidDataParallel {
        /// What is wrong, naming the setting or environment variable.
        reason: String,
    },
    /// A replica of a data-parallel run failed or panicked; the other replicas were stopped.
    #[error("data parallel: replica {rank} failed: {message}")]
    ReplicaFailed {
        /// The global rank of the replica that failed first.
        rank: u32,
        /// Its error or panic message.
        message: String,
    },
    /// The data opened for a position reported another one: the epoch's batches were not
    /// positioned where the trainer stands (resuming from a checkpoint, say).
    #[error(
        "the data opened at {requested} reports position {reported}: open the epoch's batches at the position `fit` passes (a loader's `resume_epoch`, or `PlainBatches::new`)"
    )]
    DataPosition {
        /// Where the trainer asked the data to start.
        requested: kiln_ml_core::Position,
        /// Where the opened batches said they stand.
        reported: kiln_ml_core::Position,
    },
    /// The data `fit` opened after loading a checkpoint is another stream than the one the
    /// checkpoint was saved on, so its saved position would repeat or skip samples.
    #[error(
        "checkpoint resumes in epoch {epoch}, but the data changed since it was saved (data key {saved}, now {current}): other files, seed or sampler settings, or a kiln release that plans them differently; set `resume_on_changed_data` to continue anyway"
    )]
    DataChanged {
        /// The epoch being resumed.
        epoch: u64,
        /// The data key saved in the checkpoint.
        saved: kiln_ml_core::Fingerprint,
        /// The data key of the batches opened now.
        current: kiln_ml_core::Fingerprint,
    },
    /// The data failed to open an epoch or to deliver a batch.
    #[error("data error in epoch {epoch} at batch {batch}: {source}")]
    Data {
        /// The epoch (from 0).
        epoch: u64,
        /// Index of the batch within the epoch (from 0).
        batch: u64,
        /// The iterator's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A metric rejected a validation output.
    #[error("metric rejected validation batch {batch}: {source}")]
    Metric {
        /// Index of the validation batch (from 0).
        batch: u64,
        /// The metric's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A metric's read-back at the end of a validation pass failed: a device error, or an
    /// output found invalid only then (the metric's error names the batch).
    #[error("metric failed reading back the validation pass of {batches} batches: {source}")]
    MetricFlush {
        /// Batches in the pass.
        batches: u64,
        /// The metric's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A callback monitors a metric that the epoch did not log.
    #[error(
        "{callback} monitors `{metric}`, which epoch {epoch} did not log (logged: {logged}); log it with `Trainer::log_metric` in the end-of-epoch callback of `fit_with`"
    )]
    MissingMetric {
        /// The callback.
        callback: &'static str,
        /// The metric it monitors.
        metric: String,
        /// The epoch.
        epoch: u64,
        /// The names the epoch logged, comma-separated (`none` when none).
        logged: String,
    },
    /// Two callbacks of one trainer save their states under the same key, so a checkpoint
    /// could not tell whose is whose (Lightning refuses the same).
    #[error(
        "two callbacks save their state under the key `{key}` (callbacks {first} and {second}, counted from 0 in the order added): a checkpoint could not tell them apart; give them different monitors, or keep one"
    )]
    DuplicateCallbackState {
        /// The shared key.
        key: String,
        /// The first callback with it.
        first: usize,
        /// The second.
        second: usize,
    },
    /// A logger could not write its file.
    #[error("logger {path}: {action} failed: {source}")]
    LogIo {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A checkpoint was requested while micro-batches of an optimizer step were still pending.
    #[error(
        "cannot checkpoint in the middle of optimizer step {step}: {pending} micro-batches are accumulated; checkpoint after the step completes"
    )]
    CheckpointMidWindow {
        /// The optimizer step being accumulated (counted from 1).
        step: u64,
        /// Micro-batches accumulated so far.
        pending: u32,
    },
    /// Reading or writing a checkpoint file failed.
    #[error("checkpoint {path}: {action} failed: {source}")]
    CheckpointIo {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`write`, `rename`, `read`, ...).
        action: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A checkpoint file is damaged or not a kiln checkpoint.
    #[error("checkpoint {path} is invalid: {reason}")]
    CheckpointFormat {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the section.
        reason: String,
    },
    /// A checkpoint was written by a run whose numerics differ from this trainer's.
    #[error(
        "checkpoint {path} was written with `{field}` = {saved}, but this trainer has {current}: resuming would not continue the same run"
    )]
    CheckpointMismatch {
        /// The file.
        path: PathBuf,
        /// The configuration field that differs.
        field: &'static str,
        /// The checkpoint's value.
        saved: String,
        /// This trainer's value.
        current: String,
    },
    /// Burn could not encode or decode a record (model, optimizer or scheduler).
    #[error("checkpoint {path}: the {section} record could not be {action}: {message}")]
    Record {
        /// The file.
        path: PathBuf,
        /// `model`, `optimizer` or `scheduler`.
        section: &'static str,
        /// `encoded` or `decoded`.
        action: &'static str,
        /// Burn's message.
        message: String,
    },
}
