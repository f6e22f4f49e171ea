//! Training precision and the cast policy handed to step functions.

use std::fmt;
use std::str::FromStr;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

use crate::{Error, Result};

/// Where forward and backward run; master weights and optimizer state are f32 in every mode.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Precision {
    /// Everything in f32 (the default).
    #[default]
    F32,
    /// Forward and backward on an f16 copy of the weights, with dynamic loss scaling
    /// ([`DynamicLossScaler`](crate::DynamicLossScaler)) against gradient underflow and overflow.
    F16Mixed,
    /// Forward and backward on a bf16 copy of the weights; bf16 has f32's range, so no loss
    /// scaling.
    Bf16Mixed,
}

impl Precision {
    /// The dtype forward and backward run in.
    pub fn compute_dtype(self) -> FloatDType {
        match self {
            Precision::F32 => FloatDType::F32,
            Precision::F16Mixed => FloatDType::F16,
            Precision::Bf16Mixed => FloatDType::BF16,
        }
    }

    /// Whether a low-precision copy of the model is made for each step.
    pub fn is_mixed(self) -> bool {
        self != Precision::F32
    }

    /// Whether this mode needs a loss scaler (only f16 does).
    pub fn needs_loss_scaling(self) -> bool {
        self == Precision::F16Mixed
    }

    /// A short snake_case name, as used in configs and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16Mixed => "f16_mixed",
            Precision::Bf16Mixed => "bf16_mixed",
        }
    }

    /// Fails with [`Error::UnsupportedPrecision`] when backend `B` cannot compute in this
    /// mode's dtype on `device` (ndarray has no f16; flex and CUDA have both).
    pub fn check_supported<B: Backend>(self, device: &B::Device) -> Result<()> {
        let dtype = match self.compute_dtype() {
            FloatDType::F16 => DType::F16,
            FloatDType::BF16 => DType::BF16,
            _ => return Ok(()),
        };
        if B::supports_dtype(device, dtype) {
            Ok(())
        } else {
            Err(Error::UnsupportedPrecision {
                precision: self,
                dtype: format!("{dtype:?}"),
                backend: B::name(device),
                device: format!("{device:?}"),
            })
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "f32" | "fp32" | "32" => Ok(Precision::F32),
            "f16_mixed" | "f16" | "fp16" | "16_mixed" => Ok(Precision::F16Mixed),
            "bf16_mixed" | "bf16" => Ok(Precision::Bf16Mixed),
            other => Err(format!(
                "unknown precision {other:?}: use f32, f16_mixed or bf16_mixed"
            )),
        }
    }
}

/// The cast policy a step function follows, given to [`TrainStep::step`](crate::TrainStep::step)
/// and [`InferenceStep::step`](crate::InferenceStep::step).
///
/// Burn has no type promotion (an f16 tensor times an f32 tensor panics), so a step casts its
/// float inputs to the compute dtype with [`input`](Autocast::input) before the model, and
/// casts activations back to f32 with [`full`](Autocast::full) before losses, softmax and norms,
/// as PyTorch's autocast does. Both are no-ops in [`Precision::F32`]. Casts are differentiable.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, Tensor};
/// use kiln_ml_train::{Autocast, Precision};
///
/// let autocast = Autocast::new(Precision::Bf16Mixed);
/// let x = Tensor::<Flex, 2>::ones([2, 3], &Default::default());
/// let low = autocast.input(x);
/// assert_eq!(low.dtype(), DType::BF16);
/// assert_eq!(autocast.full(low).dtype(), DType::F32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Autocast {
    precision: Precision,
}

impl Autocast {
    /// The policy of a precision mode.
    pub fn new(precision: Precision) -> Self {
        Self { precision }
    }

    /// The precision mode.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The dtype the model's weights have in this step.
    pub fn compute_dtype(&self) -> FloatDType {
        self.precision.compute_dtype()
    }

    /// Casts a float input to the compute dtype (a no-op in f32 mode).
    pub fn input<B: Backend, const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        if self.precision.is_mixed() {
            tensor.cast(self.compute_dtype())
        } else {
            tensor
        }
    }

    /// Casts an activation back to f32, for losses and other precision-sensitive ops (a no-op
    /// when it already is f32).
    pub fn full<B: Backend, const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        tensor.cast(FloatDType::F32)
    }

    /// Runs a layer that the [`PrecisionPolicy`](crate::PrecisionPolicy) keeps in f32 (a
    /// normalization layer, a module with running statistics, a module named in
    /// `keep_f32`): casts `input` to f32, runs `layer`, and casts its output back to the
    /// compute dtype so the layers after it see what they expect. A plain call in f32 mode.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::nn::LayerNormConfig;
    /// use burn::tensor::{DType, Tensor};
    /// use kiln_ml_train::{Autocast, Precision};
    ///
    /// let device = Default::default();
    /// let norm = LayerNormConfig::new(3).init::<Flex>(&device); // its weights stay f32
    /// let autocast = Autocast::new(Precision::F16Mixed);
    /// let hidden = autocast.input(Tensor::<Flex, 2>::ones([2, 3], &device));
    /// let normalized = autocast.keep_f32(hidden, |x| norm.forward(x));
    /// assert_eq!(normalized.dtype(), DType::F16);
    /// ```
    pub fn keep_f32<B: Backend, const D: usize, const E: usize>(
        &self,
        input: Tensor<B, D>,
        layer: impl FnOnce(Tensor<B, D>) -> Tensor<B, E>,
    ) -> Tensor<B, E> {
        if !self.precision.is_mixed() {
            return layer(input);
        }
        layer(input.cast(FloatDType::F32)).cast(self.compute_dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for precision in [Precision::F32, Precision::F16Mixed, Precision::Bf16Mixed] {
            assert_eq!(precision.name().parse::<Precision>(), Ok(precision));
        }
        assert_eq!("bf16-mixed".parse::<Precision>(), Ok(Precision::Bf16Mixed));
        assert!("f8".parse::<Precision>().unwrap_err().contains("f8"));
    }

    #[test]
    fn only_f16_needs_a_scaler() {
        assert!(Precision::F16Mixed.needs_loss_scaling());
        assert!(!Precision::Bf16Mixed.needs_loss_scaling());
        assert!(!Precision::F32.is_mixed());
    }
}
