//! `TrainerConfig`: every setting of the trainer, serde-friendly, validated, with documented
//! defaults (Burn's `XConfig` style).

use std::path::PathBuf;

use crate::{
    EmaConfig, Error, GradientClipping, LossScalerConfig, Precision, PrecisionPolicy, Result,
    SkipWarningConfig,
};

/// What the accumulated gradient of one optimizer step is divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LossNormalization {
    /// Losses are means over their micro-batch; the step's gradient is the mean over the
    /// micro-batches actually in the window (a final partial window of `k < K` divides by `k`,
    /// not by `K`). The default.
    #[default]
    MicroBatches,
    /// Losses are sums over items (tokens, agents) and each step output reports its item count
    /// with [`StepOutput::with_items`](crate::StepOutput::with_items); the step's gradient is
    /// divided by the window's total item count, so every item weighs the same however the
    /// micro-batches were padded.
    Items,
}

/// When and where the trainer writes checkpoints during [`fit`](crate::Trainer::fit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Directory of the checkpoint files (created when missing).
    pub directory: PathBuf,
    /// Write one every this many optimizer steps; 0 turns step checkpoints off.
    #[serde(default)]
    pub every_steps: u64,
    /// Also write one at the end of every epoch, unless `every_steps` just wrote the epoch's
    /// last step (that file, written before the epoch's end, stands for it). Default true.
    #[serde(default = "yes")]
    pub at_epoch_end: bool,
    /// Keep only the newest this many files. Default 3.
    #[serde(default = "three")]
    pub keep_last: u32,
}

fn yes() -> bool {
    true
}

fn three() -> u32 {
    3
}

impl CheckpointConfig {
    /// Checkpoints in `directory` at every epoch end, keeping the last 3.
    pub fn new(directory: impl Into<PathBuf>) -> Self {
        Self {
            directory: directory.into(),
            every_steps: 0,
            at_epoch_end: true,
            keep_last: 3,
        }
    }

    /// Also checkpoints every `steps` optimizer steps.
    pub fn with_every_steps(mut self, steps: u64) -> Self {
        self.every_steps = steps;
        self
    }

    /// Keeps only the newest `files` checkpoints.
    pub fn with_keep_last(mut self, files: u32) -> Self {
        self.keep_last = files;
        self
    }
}

/// The trainer's settings. Start from [`TrainerConfig::new`] (the defaults below) or from a
/// preset ([`Preset`](crate::Preset)), then adjust with the `with_*` methods.
///
/// Serialized with serde (unknown fields are rejected, missing ones take their default); also
/// a Burn [`Config`](burn::config::Config), so `config.save(path)` / `TrainerConfig::load(path)`
/// work as for any Burn config.
///
/// ```
/// use kiln_ml_train::{GradientClipping, Precision, TrainerConfig};
///
/// let config = TrainerConfig::new()
///     .with_precision(Precision::Bf16Mixed)
///     .with_accumulation_steps(4)
///     .with_clipping(Some(GradientClipping::Norm { max_norm: 1.0 }));
/// config.validate().unwrap();
/// let json = serde_json::to_string(&config).unwrap();
/// assert_eq!(serde_json::from_str::<TrainerConfig>(&json).unwrap(), config);
/// assert!(TrainerConfig::new().with_accumulation_steps(0).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainerConfig {
    /// Epochs [`fit`](crate::Trainer::fit) runs. Default 1.
    pub num_epochs: u64,
    /// Precision of forward and backward. Default [`Precision::F32`].
    pub precision: Precision,
    /// Which modules keep f32 weights under mixed precision. Default: Burn's normalization
    /// layers (and, always, modules with running statistics).
    pub precision_policy: PrecisionPolicy,
    /// The f16 loss scaler (used by [`Precision::F16Mixed`] only). Default PyTorch's settings.
    pub loss_scaler: LossScalerConfig,
    /// Micro-batches per optimizer step (gradient accumulation). Default 1.
    pub accumulation_steps: u32,
    /// What accumulated gradients are divided by. Default
    /// [`LossNormalization::MicroBatches`].
    pub loss_normalization: LossNormalization,
    /// Clipping after unscaling. Default none.
    pub clipping: Option<GradientClipping>,
    /// Compute the global gradient norm and read it back with the loss every step (for reports
    /// and the inf/NaN check of the gradients, which then skips a non-finite step). One host
    /// readback per optimizer step. Default false; the `balanced`, `reproducible` and `ci`
    /// presets turn it on.
    pub track_grad_norm: bool,
    /// Read the loss back to the host every this many optimizer steps (it then appears in
    /// [`StepReport::loss`](kiln_ml_core::StepReport::loss)); 0 reads it only when asked
    /// ([`Trainer::last_loss`](crate::Trainer::last_loss)). A readback makes the host wait for
    /// the device, so f32 and bf16 steps do none by default; f16 steps read loss and gradient
    /// norm back every step anyway, for the loss scaler. Default 0.
    pub read_loss_every: u64,
    /// How many optimizer steps the host may have queued on the device: once this many are
    /// queued past the last one known to have finished, the host waits for an earlier one to
    /// finish (through a read of its loss started when it was queued), while the later ones
    /// stay queued, so the device is never left idle between steps
    /// ([`Counters::lagged_waits`](crate::Counters::lagged_waits) counts these waits; none is a
    /// device sync). Reading costs host time, so only every `max(1, bound / 2)`-th step
    /// starts one: the queue then stays between half the bound and the bound. This is the
    /// bounded run-ahead CUDA's launch queue gives PyTorch: without a bound the queue, and the
    /// batches uploaded for it, grow for the whole epoch (though on an H200, and on lavapipe
    /// with a small quickstart, no bound was the fastest: docs/performance.md). 0 never waits; 1 waits for every step as it is queued. A step that reads
    /// back empties the count. Default 2: the host queues a step while the one before it runs.
    pub max_queued_steps: u64,
    /// Check the loss of every micro-batch and the gradients of every step, and stop with an
    /// error naming the step on NaN or inf (one extra host sync per micro-batch). Under
    /// f16-mixed, gradients that overflow are the loss scaler's signal (the step is skipped and
    /// the scale backs off), so there only a non-finite loss stops training. Default false.
    pub detect_anomalies: bool,
    /// Seed of the backend RNG (set once when the trainer is built) and of the trainer's host
    /// RNG. Default 0.
    pub seed: u64,
    /// Reseed the backend RNG before every optimizer step from (`seed`, step), so dropout and
    /// other random ops are a function of the step and resume reproduces them exactly.
    /// Default false.
    pub reseed_every_step: bool,
    /// Stop [`fit`](crate::Trainer::fit) after this many optimizer steps in total, writing a
    /// checkpoint of that step when checkpoints are on (whatever their schedule). Default none.
    pub max_steps: Option<u64>,
    /// Train on at most this many batches per epoch (the `ci` preset's handful). Default none.
    pub max_batches_per_epoch: Option<u64>,
    /// Train every epoch on the first this many batches of epoch 0 (the `debug` preset's
    /// overfitting check). Default none.
    pub overfit_batches: Option<u64>,
    /// Validate on at most this many batches. Default none.
    pub max_validation_batches: Option<u64>,
    /// Checkpoints during [`fit`](crate::Trainer::fit). Default none.
    pub checkpoint: Option<CheckpointConfig>,
    /// The skipped-step warning. Default: more than 5% of the last 100 steps after 100 steps.
    pub skip_warning: SkipWarningConfig,
    /// Synchronize the device at every phase boundary even when no observer asks for accurate
    /// timing. Default false.
    pub sync_phase_timing: bool,
    /// Continue from a checkpoint even when the data `fit` opens is another stream than the
    /// one it was saved on (other files, seed or sampler settings: see
    /// [`kiln_ml_core::data_key`]), where the saved position silently repeats or skips samples.
    /// Default false: such a resume fails with [`Error::DataChanged`](crate::Error::DataChanged).
    pub resume_on_changed_data: bool,
    /// While the first optimizer step of a [`fit`](crate::Trainer::fit) runs longer than this
    /// many seconds, print a notice on stderr (again at the same interval): how long it has
    /// run, the phase it is in, and whether the process is busy compiling and autotuning
    /// kernels or idle waiting on the device. 0 turns the notice off. Default 20.
    pub first_step_notice_seconds: f64,
    /// Keep an exponential moving average of the weights
    /// ([`Trainer::ema_model`](crate::Trainer::ema_model),
    /// [`validate_ema`](crate::Trainer::validate_ema)); saved in checkpoints. Default none.
    pub ema: Option<EmaConfig>,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            num_epochs: 1,
            precision: Precision::F32,
            precision_policy: PrecisionPolicy::default(),
            loss_scaler: LossScalerConfig::default(),
            accumulation_steps: 1,
            loss_normalization: LossNormalization::MicroBatches,
            clipping: None,
            track_grad_norm: false,
            read_loss_every: 0,
            max_queued_steps: 2,
            detect_anomalies: false,
            seed: 0,
            reseed_every_step: false,
            max_steps: None,
            max_batches_per_epoch: None,
            overfit_batches: None,
            max_validation_batches: None,
            checkpoint: None,
            skip_warning: SkipWarningConfig::default(),
            sync_phase_timing: false,
            resume_on_changed_data: false,
            first_step_notice_seconds: 20.0,
            ema: None,
        }
    }
}

impl burn::config::Config for TrainerConfig {}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty;)*) => {
        impl TrainerConfig {
            $(
                $(#[$doc])*
                pub fn $name(mut self, value: $ty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Sets [`num_epochs`](Self::num_epochs).
    with_num_epochs: num_epochs: u64;
    /// Sets [`precision`](Self::precision).
    with_precision: precision: Precision;
    /// Sets [`precision_policy`](Self::precision_policy).
    with_precision_policy: precision_policy: PrecisionPolicy;
    /// Sets [`read_loss_every`](Self::read_loss_every).
    with_read_loss_every: read_loss_every: u64;
    /// Sets [`max_queued_steps`](Self::max_queued_steps).
    with_max_queued_steps: max_queued_steps: u64;
    /// Sets [`loss_scaler`](Self::loss_scaler).
    with_loss_scaler: loss_scaler: LossScalerConfig;
    /// Sets [`accumulation_steps`](Self::accumulation_steps).
    with_accumulation_steps: accumulation_steps: u32;
    /// Sets [`loss_normalization`](Self::loss_normalization).
    with_loss_normalization: loss_normalization: LossNormalization;
    /// Sets [`clipping`](Self::clipping).
    with_clipping: clipping: Option<GradientClipping>;
    /// Sets [`track_grad_norm`](Self::track_grad_norm).
    with_track_grad_norm: track_grad_norm: bool;
    /// Sets [`detect_anomalies`](Self::detect_anomalies).
    with_detect_anomalies: detect_anomalies: bool;
    /// Sets [`seed`](Self::seed).
    with_seed: seed: u64;
    /// Sets [`reseed_every_step`](Self::reseed_every_step).
    with_reseed_every_step: reseed_every_step: bool;
    /// Sets [`max_steps`](Self::max_steps).
    with_max_steps: max_steps: Option<u64>;
    /// Sets [`max_batches_per_epoch`](Self::max_batches_per_epoch).
    with_max_batches_per_epoch: max_batches_per_epoch: Option<u64>;
    /// Sets [`overfit_batches`](Self::overfit_batches).
    with_overfit_batches: overfit_batches: Option<u64>;
    /// Sets [`max_validation_batches`](Self::max_validation_batches).
    with_max_validation_batches: max_validation_batches: Option<u64>;
    /// Sets [`checkpoint`](Self::checkpoint).
    with_checkpoint: checkpoint: Option<CheckpointConfig>;
    /// Sets [`skip_warning`](Self::skip_warning).
    with_skip_warning: skip_warning: SkipWarningConfig;
    /// Sets [`sync_phase_timing`](Self::sync_phase_timing).
    with_sync_phase_timing: sync_phase_timing: bool;
    /// Sets [`resume_on_changed_data`](Self::resume_on_changed_data).
    with_resume_on_changed_data: resume_on_changed_data: bool;
    /// Sets [`first_step_notice_seconds`](Self::first_step_notice_seconds).
    with_first_step_notice_seconds: first_step_notice_seconds: f64;
    /// Sets [`ema`](Self::ema).
    with_ema: ema: Option<EmaConfig>;
}

impl TrainerConfig {
    /// The defaults (see each field).
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks every field; the error names the first bad one and what is allowed.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, value: String, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                value,
                reason: reason.to_owned(),
            })
        };
        if self.accumulation_steps == 0 {
            return bad(
                "accumulation_steps",
                "0".to_owned(),
                "must be >= 1 (1 means no accumulation)",
            );
        }
        let positive = [
            ("max_steps", self.max_steps),
            ("max_batches_per_epoch", self.max_batches_per_epoch),
            ("overfit_batches", self.overfit_batches),
            ("max_validation_batches", self.max_validation_batches),
        ];
        for (field, value) in positive {
            if value == Some(0) {
                return bad(field, "Some(0)".to_owned(), "must be None or >= 1");
            }
        }
        // Checked under every precision: the checkpoint saves it, and a value JSON cannot hold
        // (an infinite scale) would make that checkpoint unreadable.
        self.loss_scaler.validate()?;
        if let Some(clipping) = &self.clipping {
            clipping.validate()?;
        }
        let notice = self.first_step_notice_seconds;
        if !(notice.is_finite() && notice >= 0.0)
            || std::time::Duration::try_from_secs_f64(notice).is_err()
        {
            return bad(
                "first_step_notice_seconds",
                notice.to_string(),
                "must be a finite number of seconds >= 0 (0 turns the notice off) that a \
                 Duration holds",
            );
        }
        let warning = &self.skip_warning;
        if warning.window_steps == 0 {
            return bad("skip_warning.window_steps", "0".to_owned(), "must be >= 1");
        }
        if !(0.0..=1.0).contains(&warning.max_skip_fraction) {
            return bad(
                "skip_warning.max_skip_fraction",
                warning.max_skip_fraction.to_string(),
                "must be in [0, 1]",
            );
        }
        if let Some(checkpoint) = &self.checkpoint {
            if checkpoint.directory.as_os_str().is_empty() {
                // `Path::new("").join(name)` is `name`: the files would land in the current
                // directory, where a listing of "" finds none of them, so none would ever be
                // pruned nor found to resume from. Usually an unset setting.
                return bad(
                    "checkpoint.directory",
                    "\"\"".to_owned(),
                    "is empty: name a directory (\".\" for the current one)",
                );
            }
            if checkpoint.every_steps == 0 && !checkpoint.at_epoch_end {
                return bad(
                    "checkpoint.every_steps",
                    "0".to_owned(),
                    "with at_epoch_end = false no checkpoint would ever be written",
                );
            }
            if checkpoint.keep_last == 0 {
                return bad("checkpoint.keep_last", "0".to_owned(), "must be >= 1");
            }
        }
        if let Some(ema) = &self.ema {
            if !(0.0..1.0).contains(&ema.decay) {
                return bad("ema.decay", ema.decay.to_string(), "must be in [0, 1)");
            }
            if ema.every_steps == 0 {
                return bad("ema.every_steps", "0".to_owned(), "must be >= 1");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_fail_later_are_refused_up_front() {
        // A notice no Duration holds would panic when `fit` starts.
        let error = TrainerConfig::new()
            .with_first_step_notice_seconds(1e20)
            .validate()
            .unwrap_err();
        assert!(
            error.to_string().contains("first_step_notice_seconds"),
            "{error}"
        );
        // A scaler setting JSON cannot hold would make every checkpoint unreadable, in f32 too.
        let config = TrainerConfig::new().with_loss_scaler(crate::LossScalerConfig {
            init_scale: f32::INFINITY,
            ..Default::default()
        });
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("loss_scaler.init_scale"), "{error}");
    }

    #[test]
    fn defaults_are_valid_and_round_trip() {
        let config = TrainerConfig::new();
        config.validate().unwrap();
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            serde_json::from_str::<TrainerConfig>(&json).unwrap(),
            config
        );
        // Missing fields take defaults.
        let partial: TrainerConfig = serde_json::from_str(r#"{"accumulation_steps": 4}"#).unwrap();
        assert_eq!(partial.accumulation_steps, 4);
        assert_eq!(partial.precision, Precision::F32);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let error = serde_json::from_str::<TrainerConfig>(r#"{"acumulation_steps": 4}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("acumulation_steps"), "{error}");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (TrainerConfig::new().with_max_steps(Some(0)), "max_steps"),
            (
                TrainerConfig::new().with_clipping(Some(GradientClipping::Norm { max_norm: 0.0 })),
                "clipping.max_norm",
            ),
            (
                TrainerConfig::new()
                    .with_precision(Precision::F16Mixed)
                    .with_loss_scaler(LossScalerConfig {
                        backoff_factor: 2.0,
                        ..Default::default()
                    }),
                "loss_scaler.backoff_factor",
            ),
            (
                TrainerConfig::new()
                    .with_checkpoint(Some(CheckpointConfig::new("x").with_keep_last(0))),
                "checkpoint.keep_last",
            ),
            (
                TrainerConfig::new().with_checkpoint(Some(CheckpointConfig::new(""))),
                "checkpoint.directory",
            ),
        ];
        for (config, field) in cases {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(field), "{field}: {error}");
        }
    }
}
