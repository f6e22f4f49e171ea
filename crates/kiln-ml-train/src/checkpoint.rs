//! Saving and restoring a whole run: model, optimizer, scheduler, loss scaler, RNG, data
//! position, counters and the stateful callbacks' states.

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Fingerprint, Position};

use crate::checkpoint_file::{read_sections, write_sections};
use crate::clipping::read_scalar;
use crate::param_shapes::{first_shape_difference, param_shapes};
use crate::rng::{RngState, rng_from_state, rng_state};
use crate::trainer::LastLoss;
use crate::{
    Counters, Error, LossScalerState, Precision, Result, TrainStep, Trainer, TrainerConfig,
};

/// Burn's named MessagePack in memory, f32 kept as f32: exact, and it reports decode errors
/// instead of panicking (Burn's bincode bytes recorder panics on bad input).
type Bytes = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// Everything of a run that is not a Burn record.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainerState {
    kiln_train_version: String,
    /// The epoch being trained; absent in files from before it was saved (then the
    /// position's epoch).
    #[serde(default)]
    epoch: Option<u64>,
    position: Position,
    /// The identity of the data stream the position counts in, when the data reported one.
    #[serde(default)]
    data_key: Option<Fingerprint>,
    counters: Counters,
    loss_scaler: Option<LossScalerState>,
    host_rng: RngState,
    last_loss: Option<f64>,
    config: TrainerConfig,
    /// The stateful callbacks' states by key ([`Callback::state_key`](crate::Callback::state_key)); absent
    /// when there are none, and in files from before they were saved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    callbacks: BTreeMap<String, serde_json::Value>,
    /// Whether the loss was multiplied by the scale over the accumulation window (PyTorch's
    /// `scale(loss / K)`); absent in files from before, whose scale settled K times lower.
    #[serde(default)]
    loss_scale_over_window: bool,
}

const STATE: &str = "trainer_state";
const MODEL: &str = "model";
const OPTIMIZER: &str = "optimizer";
const SCHEDULER: &str = "scheduler";
/// The moving average of the weights, when the run keeps one.
const EMA: &str = "ema";

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Writes the whole run to `path` atomically (temporary file + rename).
    ///
    /// Only between optimizer steps: with micro-batches pending it fails with
    /// [`Error::CheckpointMidWindow`] (their gradients are not saved).
    pub fn save_checkpoint(&self, path: &Path) -> Result<()> {
        if !self.window.is_empty() {
            return Err(Error::CheckpointMidWindow {
                step: self.counters.optimizer_steps + 1,
                pending: self.window.micro_batches,
            });
        }
        let started = std::time::Instant::now();
        let state = TrainerState {
            kiln_train_version: env!("CARGO_PKG_VERSION").to_owned(),
            epoch: Some(self.epoch),
            position: self.position,
            data_key: self.data_key,
            counters: self.counters,
            loss_scaler: self.scaler.as_ref().map(|scaler| scaler.state()),
            host_rng: rng_state(&self.host_rng),
            // A checkpoint reads the whole model back anyway; the loss is one value more.
            last_loss: match &self.last_loss {
                None => None,
                Some(LastLoss::Read(value)) => Some(*value),
                Some(LastLoss::OnDevice(tensor)) => Some(read_scalar(
                    tensor.clone(),
                    "the checkpoint's readback of the last loss",
                )?),
            },
            config: self.config.clone(),
            callbacks: self.callback_states.saved().clone(),
            loss_scale_over_window: true,
        };
        let state = serde_json::to_vec_pretty(&state).map_err(|error| Error::CheckpointFormat {
            path: path.to_path_buf(),
            reason: format!("the trainer state could not be encoded: {error}"),
        })?;
        let encode_error = |section: &'static str| {
            move |error: burn::record::RecorderError| Error::Record {
                path: path.to_path_buf(),
                section,
                action: "encoded",
                message: error.to_string(),
            }
        };
        let recorder = Bytes::default();
        let model = Recorder::<B>::record(&recorder, self.model().clone().into_record(), ())
            .map_err(encode_error(MODEL))?;
        let optimizer = Recorder::<B>::record(&recorder, self.optim.to_record(), ())
            .map_err(encode_error(OPTIMIZER))?;
        let scheduler = Recorder::<B>::record(&recorder, self.scheduler.to_record::<B>(), ())
            .map_err(encode_error(SCHEDULER))?;
        let ema = match &self.ema {
            Some(ema) => Some(
                Recorder::<B>::record(&recorder, ema.clone().into_record(), ())
                    .map_err(encode_error(EMA))?,
            ),
            None => None,
        };
        let mut sections: Vec<(&str, &[u8])> = vec![
            (STATE, &state),
            (MODEL, &model),
            (OPTIMIZER, &optimizer),
            (SCHEDULER, &scheduler),
        ];
        if let Some(ema) = &ema {
            sections.push((EMA, ema));
        }
        write_sections(path, &sections)?;
        self.observers.emit(&kiln_ml_core::Event::CheckpointSaved {
            path: path.to_path_buf(),
            step: self.counters.optimizer_steps,
            elapsed: started.elapsed(),
        });
        Ok(())
    }

    /// Writes the weights of the moving average ([`ema_model`](Self::ema_model)) alone to
    /// `path`, atomically, as Burn's named MessagePack with f32 kept: load them into a model
    /// with `Module::load_file(path, &NamedMpkFileRecorder::<FullPrecisionSettings>::new(),
    /// device)` (Burn adds the `.mpk` extension; give `path` one). Returns false, writing
    /// nothing, while there is no average yet.
    pub fn save_ema_weights(&self, path: &Path) -> Result<bool> {
        let Some(ema) = &self.ema else {
            return Ok(false);
        };
        let bytes = Recorder::<B>::record(&Bytes::default(), ema.clone().into_record(), ())
            .map_err(|error| Error::Record {
                path: path.to_path_buf(),
                section: EMA,
                action: "encoded",
                message: error.to_string(),
            })?;
        kiln_ml_core::write_atomic(path, &bytes, kiln_ml_core::Durability::Synced).map_err(
            |error| Error::CheckpointIo {
                path: error.path,
                action: error.action,
                source: error.source,
            },
        )?;
        Ok(true)
    }

    /// Restores a run from `path` and returns the data position to continue from.
    ///
    /// The checkpoint must come from a run with the same numerics (precision, accumulation,
    /// normalization, clipping, seed, reseeding); otherwise [`Error::CheckpointMismatch`] names
    /// the differing field. Other settings (epochs, limits, checkpointing) may change.
    ///
    /// The stateful callbacks' states ([`Callback::state_key`](crate::Callback::state_key))
    /// are given to the callbacks when the next `fit` starts, so they may be added before or
    /// after this call; a state a callback refuses fails that `fit` with
    /// [`Error::CheckpointFormat`].
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<Position> {
        let crate::checkpoint_file::Sections {
            mut sections,
            checksum,
        } = read_sections(path)?;
        let mut take = |name: &'static str| {
            sections
                .iter()
                .position(|(section, _)| section == name)
                .map(|index| sections.swap_remove(index).1)
                .ok_or_else(|| Error::CheckpointFormat {
                    path: path.to_path_buf(),
                    reason: format!("the {name:?} section is missing"),
                })
        };
        let state_bytes = take(STATE)?;
        let model_bytes = take(MODEL)?;
        let optimizer_bytes = take(OPTIMIZER)?;
        let scheduler_bytes = take(SCHEDULER)?;
        // Optional: absent when the run kept no average (or before its first update).
        let ema_bytes = take(EMA).ok();

        let state: TrainerState =
            serde_json::from_slice(&state_bytes).map_err(|error| Error::CheckpointFormat {
                path: path.to_path_buf(),
                reason: format!("the {STATE:?} section is not valid: {error}"),
            })?;
        check_numerics(path, &state.config, &self.config)?;
        if self.scaler.is_some() != state.loss_scaler.is_some() {
            return Err(Error::CheckpointFormat {
                path: path.to_path_buf(),
                reason: "the loss scaler state does not match the precision".to_owned(),
            });
        }

        let decode_error = |section: &'static str| {
            move |error: burn::record::RecorderError| Error::Record {
                path: path.to_path_buf(),
                section,
                action: "decoded",
                message: error.to_string(),
            }
        };
        let recorder = Bytes::default();
        let model_record: M::Record = Recorder::<B>::load(&recorder, model_bytes, &self.device)
            .map_err(decode_error(MODEL))?;
        let optimizer_record: O::Record =
            Recorder::<B>::load(&recorder, optimizer_bytes, &self.device)
                .map_err(decode_error(OPTIMIZER))?;
        let scheduler_record: S::Record<B> =
            Recorder::<B>::load(&recorder, scheduler_bytes, &self.device)
                .map_err(decode_error(SCHEDULER))?;

        let ema = match ema_bytes {
            Some(bytes) if self.config.ema.is_some() => {
                let record: M::Record = Recorder::<B>::load(&recorder, bytes, &self.device)
                    .map_err(decode_error(EMA))?;
                Some(crate::independent_copy(self.model()).load_record(record))
            }
            _ => None,
        };
        // Into a copy with running statistics of its own: `load_record` writes them in place,
        // and a checkpoint refused below must leave the live model as it was.
        let model = crate::independent_copy(self.model()).load_record(model_record);
        crate::materialize(&model);
        let (expected, loaded) = (param_shapes(self.model()), param_shapes(&model));
        if let Some((parameter, saved, current)) = first_shape_difference(&loaded, &expected) {
            return Err(Error::CheckpointMismatch {
                path: path.to_path_buf(),
                field: "model parameter shapes",
                saved: format!("{parameter}: {saved}"),
                current: format!("{parameter}: {current}"),
            });
        }
        self.model = Some(model);
        self.model_generation = crate::step_hints::fresh_generation();
        // Loaded values carry no autodiff graph; restarted from the weights when absent.
        self.ema = ema.as_ref().map(crate::ema::ema_start);
        self.optim = self.optim.clone().load_record(optimizer_record);
        self.scheduler = self.scheduler.clone().load_record::<B>(scheduler_record);
        if let (Some(scaler), Some(saved)) = (self.scaler.as_mut(), state.loss_scaler) {
            let saved = if state.loss_scale_over_window {
                saved
            } else {
                scale_of_an_older_file(saved, self.config.accumulation_steps, scaler.config())
            };
            scaler.load_state(saved);
        }
        self.host_rng = rng_from_state(&state.host_rng);
        if let Some(membership) = &self.membership {
            // Rank 0's state, on this replica's own stream (as `join` set it).
            self.host_rng.set_stream(u64::from(membership.rank));
        }
        self.counters = state.counters;
        // The window of skipped steps is not saved: judged again once it has refilled.
        self.monitor = crate::skip_monitor::SkipMonitor::resumed_after(
            self.config.skip_warning,
            self.counters.optimizer_steps,
        );
        self.epoch = state.epoch.unwrap_or(state.position.epoch);
        self.position = state.position;
        self.data_key = state.data_key;
        self.check_data_key = state.data_key.is_some();
        self.last_loss = state.last_loss.map(LastLoss::Read);
        // Given to the callbacks when `fit` starts (they may be added after this call).
        self.callback_states
            .load(path.to_path_buf(), state.callbacks);
        self.window = Default::default();
        // What this trainer wrote belongs to the trajectory it leaves: a later step of the
        // loaded one is written again, not taken as already on disk.
        self.last_scheduled_checkpoint = None;
        self.resumed_from_step = Some(self.counters.optimizer_steps);
        self.loaded_checkpoint = Some(checksum);
        // Mid-epoch or not, this trainer's observers have not heard the epoch start: the next
        // batch announces it (loggers and the profiler tag what follows by it).
        self.epoch_started = false;
        Ok(self.position)
    }
}

/// The scale a file from before the loss was multiplied by `scale / K` continues with: its
/// scale settled K times lower than it now would, so it is multiplied by K (within
/// `max_scale`, and only while finite), which gives the backward pass the values it had.
fn scale_of_an_older_file(
    saved: LossScalerState,
    accumulation_steps: u32,
    config: &crate::LossScalerConfig,
) -> LossScalerState {
    let mut scale = saved.scale * accumulation_steps as f32;
    if let Some(max) = config.max_scale {
        scale = scale.min(max);
    }
    LossScalerState {
        scale: if scale.is_finite() {
            scale
        } else {
            saved.scale
        },
        ..saved
    }
}

/// Fails when a setting that changes the numbers of the run differs.
fn check_numerics(path: &Path, saved: &TrainerConfig, current: &TrainerConfig) -> Result<()> {
    fn text<T: serde::Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap_or_else(|_| "?".to_owned())
    }
    let pairs = [
        (
            "precision",
            text(&saved.precision),
            text(&current.precision),
        ),
        (
            "accumulation_steps",
            text(&saved.accumulation_steps),
            text(&current.accumulation_steps),
        ),
        (
            "loss_normalization",
            text(&saved.loss_normalization),
            text(&current.loss_normalization),
        ),
        ("clipping", text(&saved.clipping), text(&current.clipping)),
        // Growth interval and factors shape the scale trajectory, as PyTorch's state_dict keeps.
        (
            "loss_scaler",
            text(&saved.loss_scaler),
            text(&current.loss_scaler),
        ),
        ("seed", text(&saved.seed), text(&current.seed)),
        (
            "reseed_every_step",
            text(&saved.reseed_every_step),
            text(&current.reseed_every_step),
        ),
    ];
    // Which modules stay in f32 shapes the numbers only under mixed precision.
    let policy = (current.precision != Precision::F32).then(|| {
        (
            "precision_policy",
            text(&saved.precision_policy),
            text(&current.precision_policy),
        )
    });
    for (field, saved, current) in pairs.into_iter().chain(policy) {
        if saved != current {
            return Err(Error::CheckpointMismatch {
                path: path.to_path_buf(),
                field,
                saved,
                current,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_file_scale_is_multiplied_by_the_window_within_its_bounds() {
        let saved = LossScalerState {
            scale: 1024.0,
            growth_tracker: 7,
        };
        let config = crate::LossScalerConfig::default();
        let carried = scale_of_an_older_file(saved, 4, &config);
        assert_eq!(
            carried,
            LossScalerState {
                scale: 4096.0,
                growth_tracker: 7
            }
        );
        assert_eq!(scale_of_an_older_file(saved, 1, &config), saved);
        let capped = crate::LossScalerConfig {
            max_scale: Some(2048.0),
            ..config
        };
        assert_eq!(scale_of_an_older_file(saved, 4, &capped).scale, 2048.0);
        let huge = LossScalerState {
            scale: f32::MAX,
            growth_tracker: 0,
        };
        assert_eq!(scale_of_an_older_file(huge, 4, &config), huge);
    }
}
