//! Presets: named starting points for the trainer's settings.
//!
//! | preset | trainer settings |
//! |---|---|
//! | `max_speed` | bf16-mixed (f16 + scaler, then f32, where unsupported), no grad-norm tracking, no anomaly checks, no host readback in bf16 and f32 |
//! | `reproducible` | f32, backend reseeded every step from (seed, step), fixed seed, grad-norm tracking |
//! | `balanced` | bf16-mixed (with the same fallback), grad-norm tracking |
//! | `debug` | f32, NaN/inf check of every loss and step (error naming the step), synced phase timing, overfits the first 4 batches of epoch 0 for 20 epochs |
//! | `ci` | f32, one epoch of 4 batches, 2 validation batches, no checkpoints, reseeded every step, grad-norm tracking |
//!
//! Each preset also names the GPU autotune level it suits ([`Preset::autotune_level`]):
//! `max_speed` tunes sizes finely (`extensive`), `balanced` and `reproducible` keep CubeCL's
//! default (`balanced`), `debug` and `ci` tune least (`minimal`), for the fastest first step.
//! Apply it with `kiln_ml::backend::GpuTuning` before the device is made. It matters only where
//! Burn's autotuning is compiled in (kiln's `autotune` feature, off by default). What else lies
//! outside the trainer (cargo features, loader workers) is described per preset in
//! `docs/training.md`.

use std::fmt;
use std::str::FromStr;

use burn::tensor::backend::Backend;
use kiln_ml_core::AutotuneLevel;

use crate::{Precision, TrainerConfig};

/// A named starting configuration; see the module table for what each one sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Preset {
    /// Throughput first: mixed precision, no optional syncs.
    MaxSpeed,
    /// Bit-identical reruns and resumes on the same machine and backend.
    Reproducible,
    /// Mixed precision with monitoring: the usual choice.
    Balanced,
    /// Find NaNs and data bugs: f32, checks every step, overfit a few batches.
    Debug,
    /// A handful of batches on the CPU, no checkpoints: proves the loop runs.
    Ci,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 5] = [
        Preset::MaxSpeed,
        Preset::Reproducible,
        Preset::Balanced,
        Preset::Debug,
        Preset::Ci,
    ];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::MaxSpeed => "max_speed",
            Preset::Reproducible => "reproducible",
            Preset::Balanced => "balanced",
            Preset::Debug => "debug",
            Preset::Ci => "ci",
        }
    }

    /// The preset's trainer settings, device-independent (mixed presets ask for bf16; see
    /// [`config_for`](Self::config_for) for the fallback).
    pub fn config(self) -> TrainerConfig {
        let base = TrainerConfig::new();
        match self {
            Preset::MaxSpeed => base.with_precision(Precision::Bf16Mixed),
            Preset::Reproducible => base.with_reseed_every_step(true).with_track_grad_norm(true),
            Preset::Balanced => base
                .with_precision(Precision::Bf16Mixed)
                .with_track_grad_norm(true),
            Preset::Debug => base
                .with_detect_anomalies(true)
                .with_sync_phase_timing(true)
                .with_overfit_batches(Some(4))
                .with_num_epochs(20),
            Preset::Ci => base
                .with_track_grad_norm(true)
                .with_max_batches_per_epoch(Some(4))
                .with_max_validation_batches(Some(2))
                .with_reseed_every_step(true),
        }
    }

    /// The GPU autotune level the preset suits (see the module docs); the trainer does not
    /// apply it, since CubeCL's settings are the process's and must be set before any device
    /// exists: `kiln_ml::backend::GpuTuning` does.
    pub fn autotune_level(self) -> AutotuneLevel {
        match self {
            Preset::MaxSpeed => AutotuneLevel::Extensive,
            Preset::Reproducible | Preset::Balanced => AutotuneLevel::Balanced,
            Preset::Debug | Preset::Ci => AutotuneLevel::Minimal,
        }
    }

    /// The preset's settings with the precision lowered to what backend `B` supports on
    /// `device`: bf16-mixed, else f16-mixed, else f32.
    pub fn config_for<B: Backend>(self, device: &B::Device) -> TrainerConfig {
        let mut config = self.config();
        config.precision = supported_precision::<B>(config.precision, device);
        config
    }
}

/// `wanted`, or the next lower mixed mode the device supports, or f32.
fn supported_precision<B: Backend>(wanted: Precision, device: &B::Device) -> Precision {
    fall_back(wanted, |precision| {
        precision.check_supported::<B>(device).is_ok()
    })
}

/// The fallback chain of [`supported_precision`]: bf16, then f16, then f32.
fn fall_back(wanted: Precision, supported: impl Fn(Precision) -> bool) -> Precision {
    let chain: &[Precision] = match wanted {
        Precision::Bf16Mixed => &[Precision::Bf16Mixed, Precision::F16Mixed],
        Precision::F16Mixed => &[Precision::F16Mixed],
        Precision::F32 => &[],
    };
    chain
        .iter()
        .copied()
        .find(|&precision| supported(precision))
        .unwrap_or(Precision::F32)
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let wanted = text.to_ascii_lowercase().replace('-', "_");
        Preset::ALL
            .into_iter()
            .find(|preset| preset.name() == wanted)
            .ok_or_else(|| {
                format!(
                    "unknown preset {text:?}: use max_speed, reproducible, balanced, debug or ci"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_parses() {
        for preset in Preset::ALL {
            preset.config().validate().unwrap();
            assert_eq!(preset.name().parse::<Preset>(), Ok(preset));
        }
        assert!("fast".parse::<Preset>().is_err());
    }

    #[test]
    fn presets_set_what_they_promise() {
        let debug = Preset::Debug.config();
        assert!(debug.detect_anomalies && debug.overfit_batches.is_some());
        assert_eq!(debug.precision, Precision::F32);
        let ci = Preset::Ci.config();
        assert!(ci.checkpoint.is_none() && ci.max_batches_per_epoch == Some(4));
        assert!(Preset::Reproducible.config().reseed_every_step);
        assert_eq!(Preset::MaxSpeed.config().precision, Precision::Bf16Mixed);
        assert_eq!(Preset::Ci.autotune_level(), AutotuneLevel::Minimal);
        assert_eq!(Preset::MaxSpeed.autotune_level(), AutotuneLevel::Extensive);
    }

    #[test]
    fn mixed_presets_fall_back_on_devices_without_low_precision() {
        type Cpu = burn::backend::Flex;
        // flex supports bf16, so nothing changes there.
        let config = Preset::MaxSpeed.config_for::<Cpu>(&Default::default());
        assert_eq!(config.precision, Precision::Bf16Mixed);
        // The chain itself, on devices that lack bf16, or both.
        let only_f16 = |precision| precision == Precision::F16Mixed;
        assert_eq!(
            fall_back(Precision::Bf16Mixed, only_f16),
            Precision::F16Mixed
        );
        assert_eq!(fall_back(Precision::Bf16Mixed, |_| false), Precision::F32);
        assert_eq!(fall_back(Precision::F16Mixed, |_| false), Precision::F32);
        assert_eq!(
            fall_back(Precision::F16Mixed, only_f16),
            Precision::F16Mixed
        );
        assert_eq!(fall_back(Precision::F32, |_| true), Precision::F32);
    }
}
