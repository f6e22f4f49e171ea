//! Dynamic loss scaling for f16 training, with PyTorch's `GradScaler` semantics.

use crate::{Error, Result};

/// Settings of a [`DynamicLossScaler`]; the defaults are PyTorch's (`torch.amp.GradScaler`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossScalerConfig {
    /// The first scale. Default 65536 (2^16).
    pub init_scale: f32,
    /// Factor applied after `growth_interval` clean steps in a row. Default 2; must be > 1.
    pub growth_factor: f32,
    /// Factor applied after a step with inf/NaN gradients. Default 0.5; must be in (0, 1).
    pub backoff_factor: f32,
    /// Clean steps in a row before the scale grows. Default 2000.
    pub growth_interval: u32,
    /// The scale never backs off below this. Default none (PyTorch has no lower bound, and
    /// its docs warn the scale may fall below 1; users of long f16 runs often set 128).
    pub min_scale: Option<f32>,
    /// The scale never grows above this. Default none (PyTorch grows while the result is
    /// finite in f32).
    pub max_scale: Option<f32>,
}

impl Default for LossScalerConfig {
    fn default() -> Self {
        Self {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            min_scale: None,
            max_scale: None,
        }
    }
}

impl LossScalerConfig {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, value: String, reason: &str| {
            Err(Error::InvalidConfig {
                field,
                value,
                reason: reason.to_owned(),
            })
        };
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad(
                "loss_scaler.init_scale",
                self.init_scale.to_string(),
                "must be finite and > 0",
            );
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad(
                "loss_scaler.growth_factor",
                self.growth_factor.to_string(),
                "must be finite and > 1",
            );
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(
                "loss_scaler.backoff_factor",
                self.backoff_factor.to_string(),
                "must be in (0, 1)",
            );
        }
        if self.growth_interval == 0 {
            return bad(
                "loss_scaler.growth_interval",
                "0".to_owned(),
                "must be >= 1",
            );
        }
        if let Some(min) = self.min_scale
            && !(min.is_finite() && min > 0.0 && min <= self.init_scale)
        {
            return bad(
                "loss_scaler.min_scale",
                min.to_string(),
                "must be finite, > 0 and <= init_scale",
            );
        }
        if let Some(max) = self.max_scale
            && !(max.is_finite() && max >= self.init_scale)
        {
            return bad(
                "loss_scaler.max_scale",
                max.to_string(),
                "must be finite and >= init_scale",
            );
        }
        Ok(())
    }

    /// A scaler in its initial state.
    pub fn init(&self) -> Result<DynamicLossScaler> {
        self.validate()?;
        Ok(DynamicLossScaler {
            config: *self,
            state: LossScalerState {
                scale: self.init_scale,
                growth_tracker: 0,
            },
        })
    }
}

/// What a [`DynamicLossScaler`] carries from step to step: saved in checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossScalerState {
    /// The current scale.
    pub scale: f32,
    /// Clean steps in a row since the last growth or backoff.
    pub growth_tracker: u32,
}

/// The f16 loss scale: multiply the loss by [`scale`](Self::scale) before backward (the
/// trainer multiplies each micro-batch's loss by the scale over the accumulation window, as
/// PyTorch's `scaler.scale(loss / K)`), divide the gradients by as much after, and report each
/// optimizer step with [`update`](Self::update).
///
/// It follows PyTorch's `GradScaler.update` exactly (`_amp_update_scale_` kernel): a step
/// with inf/NaN gradients multiplies the scale by `backoff_factor` and resets the tracker; a
/// clean step increments the tracker, and when it reaches `growth_interval` the scale is
/// multiplied by `growth_factor` if the result is finite in f32, and the tracker resets. The
/// optional `min_scale`/`max_scale` clamp the result.
///
/// ```
/// use kiln_ml_train::LossScalerConfig;
///
/// let mut scaler = LossScalerConfig { growth_interval: 2, ..Default::default() }.init().unwrap();
/// assert_eq!(scaler.scale(), 65536.0);
/// scaler.update(true); // overflow: back off
/// assert_eq!(scaler.scale(), 32768.0);
/// scaler.update(false);
/// scaler.update(false); // two clean steps: grow
/// assert_eq!(scaler.scale(), 65536.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicLossScaler {
    config: LossScalerConfig,
    state: LossScalerState,
}

impl DynamicLossScaler {
    /// The scale to multiply the loss by (the trainer divides it by the accumulation window).
    pub fn scale(&self) -> f32 {
        self.state.scale
    }

    /// The settings.
    pub fn config(&self) -> &LossScalerConfig {
        &self.config
    }

    /// The state to checkpoint.
    pub fn state(&self) -> LossScalerState {
        self.state
    }

    /// Restores a checkpointed state.
    pub fn load_state(&mut self, state: LossScalerState) {
        self.state = state;
    }

    /// Records one optimizer step's outcome and returns the new scale.
    pub fn update(&mut self, found_non_finite: bool) -> f32 {
        let state = &mut self.state;
        if found_non_finite {
            let mut scale = state.scale * self.config.backoff_factor;
            if let Some(min) = self.config.min_scale {
                scale = scale.max(min);
            }
            state.scale = scale;
            state.growth_tracker = 0;
        } else {
            let successful = state.growth_tracker + 1;
            if successful >= self.config.growth_interval {
                let mut grown = state.scale * self.config.growth_factor;
                if let Some(max) = self.config.max_scale {
                    grown = grown.min(max);
                }
                if grown.is_finite() {
                    state.scale = grown;
                }
                state.growth_tracker = 0;
            } else {
                state.growth_tracker = successful;
            }
        }
        state.scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scaler(interval: u32) -> DynamicLossScaler {
        LossScalerConfig {
            growth_interval: interval,
            ..Default::default()
        }
        .init()
        .unwrap()
    }

    /// Scales after each update, as `torch.amp.GradScaler(growth_interval=3)` reports them
    /// with `get_scale()` after `update()` for this found-inf sequence.
    #[test]
    fn matches_pytorch_sequence() {
        let mut scaler = scaler(3);
        let found_inf = [
            false, false, true, false, false, false, false, true, true, false,
        ];
        let expected = [
            65536.0, 65536.0, 32768.0, 32768.0, 32768.0, 65536.0, 65536.0, 32768.0, 16384.0,
            16384.0,
        ];
        let scales: Vec<f32> = found_inf.iter().map(|&inf| scaler.update(inf)).collect();
        assert_eq!(scales, expected);
        assert_eq!(scaler.state().growth_tracker, 1);
    }

    #[test]
    fn pytorch_defaults() {
        let config = LossScalerConfig::default();
        assert_eq!(config.init_scale, 2f32.powi(16));
        assert_eq!(config.growth_factor, 2.0);
        assert_eq!(config.backoff_factor, 0.5);
        assert_eq!(config.growth_interval, 2000);
        let mut scaler = config.init().unwrap();
        for _ in 0..1999 {
            scaler.update(false);
        }
        assert_eq!(scaler.scale(), 65536.0);
        scaler.update(false);
        assert_eq!(scaler.scale(), 131072.0);
    }

    #[test]
    fn growth_that_overflows_f32_keeps_the_scale_and_resets_the_tracker() {
        let mut scaler = LossScalerConfig {
            init_scale: 2f32.powi(127),
            growth_interval: 1,
            ..Default::default()
        }
        .init()
        .unwrap();
        assert_eq!(scaler.update(false), 2f32.powi(127));
        assert_eq!(scaler.state().growth_tracker, 0);
    }

    #[test]
    fn no_lower_bound_by_default_and_clamps_when_asked() {
        let mut free = scaler(2000);
        for _ in 0..20 {
            free.update(true);
        }
        assert_eq!(free.scale(), 65536.0 / 2f32.powi(20));
        assert!(free.scale() < 1.0);

        let mut bounded = LossScalerConfig {
            min_scale: Some(128.0),
            max_scale: Some(131072.0),
            growth_interval: 1,
            ..Default::default()
        }
        .init()
        .unwrap();
        for _ in 0..20 {
            bounded.update(true);
        }
        assert_eq!(bounded.scale(), 128.0);
        for _ in 0..20 {
            bounded.update(false);
        }
        assert_eq!(bounded.scale(), 131072.0);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let cases = [
            LossScalerConfig {
                growth_factor: 1.0,
                ..Default::default()
            },
            LossScalerConfig {
                backoff_factor: 1.0,
                ..Default::default()
            },
            LossScalerConfig {
                growth_interval: 0,
                ..Default::default()
            },
            LossScalerConfig {
                min_scale: Some(1e9),
                ..Default::default()
            },
        ];
        let fields = [
            "growth_factor",
            "backoff_factor",
            "growth_interval",
            "min_scale",
        ];
        for (config, field) in cases.iter().zip(fields) {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(field), "{error}");
        }
    }

    proptest! {
        /// The scale only ever changes by one factor per update, and only as the rules say.
        #[test]
        fn transitions_follow_the_rules(found in proptest::collection::vec(any::<bool>(), 1..300)) {
            let mut scaler = scaler(7);
            for inf in found {
                let before = scaler.state();
                let after = scaler.update(inf);
                if inf {
                    prop_assert_eq!(after, before.scale * 0.5);
                    prop_assert_eq!(scaler.state().growth_tracker, 0);
                } else if before.growth_tracker + 1 == 7 {
                    prop_assert_eq!(after, before.scale * 2.0);
                    prop_assert_eq!(scaler.state().growth_tracker, 0);
                } else {
                    prop_assert_eq!(after, before.scale);
                    prop_assert_eq!(scaler.state().growth_tracker, before.growth_tracker + 1);
                }
            }
        }
    }
}
