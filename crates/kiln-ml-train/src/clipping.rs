//! Gradient clipping over all parameters at once, as PyTorch's `clip_grad_norm_` does.
//!
//! Burn's `GradientClippingConfig::Norm` clips each parameter tensor by its own norm, which
//! changes the direction of the full gradient; kiln computes one global norm in f32 over every
//! gradient, scales all of them by the same coefficient, and does it after loss unscaling so the
//! threshold keeps its meaning under mixed precision. Leave Burn's own `grad_clipping` unset.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};

use crate::{Error, Result, fixed_order_sum};

/// PyTorch's `eps` in `clip_grad_norm_`: `coef = max_norm / (total_norm + 1e-6)`.
pub(crate) const CLIP_NORM_EPS: f64 = 1e-6;

/// How gradients are clipped, after unscaling and before the optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GradientClipping {
    /// Scale every gradient by `min(1, max_norm / (global_norm + 1e-6))`, where the global norm
    /// is the L2 norm of all gradients concatenated (PyTorch's `clip_grad_norm_`, Lightning's
    /// `gradient_clip_algorithm="norm"`).
    Norm {
        /// The largest global norm allowed; must be > 0.
        max_norm: f64,
    },
    /// Clamp every gradient element to `[-max_abs, max_abs]` (PyTorch's `clip_grad_value_`).
    Value {
        /// The largest magnitude allowed; must be > 0.
        max_abs: f64,
    },
}

impl GradientClipping {
    /// Fails when the threshold is not finite and positive.
    pub fn validate(&self) -> Result<()> {
        let (field, value) = match *self {
            GradientClipping::Norm { max_norm } => ("clipping.max_norm", max_norm),
            GradientClipping::Value { max_abs } => ("clipping.max_abs", max_abs),
        };
        if value.is_finite() && value > 0.0 {
            Ok(())
        } else {
            Err(Error::InvalidConfig {
                field,
                value: value.to_string(),
                reason: "must be finite and > 0".to_owned(),
            })
        }
    }
}

/// The factor PyTorch's `clip_grad_norm_` multiplies every gradient by:
/// `clamp(max_norm / (norm + 1e-6), max=1)`, NaN for a NaN norm (as `torch.clamp`; Rust's
/// `f64::min` would return 1 and leave the gradients as they are).
pub(crate) fn clip_coefficient(global_norm: f64, max_norm: f64) -> f64 {
    let coefficient = max_norm / (global_norm + CLIP_NORM_EPS);
    if coefficient.is_nan() {
        coefficient
    } else {
        coefficient.min(1.0)
    }
}

/// The sum of squares of every gradient of `module`'s float parameters, computed in f32 on the
/// device, as a one-element tensor; `None` when no parameter has a gradient. No host sync.
pub(crate) fn squared_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut visitor = SquaredNorm::<B> { grads, total: None };
    module.visit(&mut visitor);
    visitor.total
}

/// Multiplies every gradient by `factor`, then clamps it to `[-max_abs, max_abs]` when given.
pub(crate) fn scale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    factor: f64,
    max_abs: Option<f64>,
) {
    if factor == 1.0 && max_abs.is_none() {
        return;
    }
    let mut visitor = ScaleGrads::<B> {
        grads,
        factor,
        max_abs,
        backend: std::marker::PhantomData,
    };
    module.visit(&mut visitor);
}

/// The factor that unscales by `unscale` and clips to a global norm of `max_norm`, computed on
/// the device from the squared norm of the scaled gradients, with no host sync:
/// `unscale * min(1, max_norm / (sqrt(squared) * unscale + 1e-6))`.
pub(crate) fn clip_factor_on_device<B: Backend>(
    squared: Tensor<B, 1>,
    unscale: f64,
    max_norm: f64,
) -> Tensor<B, 1> {
    let norm = squared.sqrt().mul_scalar(unscale);
    norm.add_scalar(CLIP_NORM_EPS)
        .recip()
        .mul_scalar(max_norm)
        .clamp_max(1.0)
        .mul_scalar(unscale)
}

/// Multiplies every gradient by a one-element device tensor (no host sync).
pub(crate) fn scale_grads_by<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    factor: Tensor<B::InnerBackend, 1>,
) {
    let mut visitor = ScaleGradsBy::<B> { grads, factor };
    module.visit(&mut visitor);
}

/// The global L2 norm of `module`'s gradients, read back to the host (one sync).
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Result<f64> {
    match squared_grad_norm::<B, M>(module, grads) {
        None => Ok(0.0),
        Some(total) => Ok(read_scalar(total, "the gradient norm readback")?.sqrt()),
    }
}

/// Clips `grads` to a global norm of at most `max_norm` in place, exactly as PyTorch's
/// `clip_grad_norm_(params, max_norm)` does, and returns the norm before clipping.
///
/// For use in hand-written loops: this reads the norm back to the host (one readback). The
/// [`Trainer`](crate::Trainer) clips without one, computing the coefficient on the device.
pub fn clip_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> Result<f64> {
    let norm = global_grad_norm::<B, M>(module, grads)?;
    scale_grads::<B, M>(module, grads, clip_coefficient(norm, max_norm), None);
    Ok(norm)
}

/// The sum of the squares of `tensor`'s elements, in f32 whatever its float type and in a fixed
/// order ([`fixed_order_sum`]): one gradient's (or one bucket's) share of the squared global
/// norm, the same bits on every run.
pub(crate) fn sum_of_squares<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, 1> {
    fixed_order_sum(tensor.cast(FloatDType::F32).square())
}

/// Reads a one-element tensor back as `f64`.
pub(crate) fn read_scalar<B: Backend>(tensor: Tensor<B, 1>, during: &'static str) -> Result<f64> {
    let data = tensor.try_into_data().map_err(|error| Error::Device {
        during,
        message: format!("{error:?}"),
    })?;
    data.iter::<f64>().next().ok_or_else(|| Error::Device {
        during,
        message: "the device returned no value".to_owned(),
    })
}

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let squares = sum_of_squares(grad);
        self.total = Some(match self.total.take() {
            Some(total) => total + squares,
            None => squares,
        });
    }
}

struct ScaleGrads<'a, B> {
    grads: &'a mut GradientsParams,
    factor: f64,
    max_abs: Option<f64>,
    backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ScaleGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(mut grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        if self.factor != 1.0 {
            grad = grad.mul_scalar(self.factor);
        }
        if let Some(max_abs) = self.max_abs {
            grad = grad.clamp(-max_abs, max_abs);
        }
        self.grads.register::<B::InnerBackend, D>(param.id, grad);
    }
}

struct ScaleGradsBy<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    factor: Tensor<B::InnerBackend, 1>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ScaleGradsBy<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let factor = self.factor.clone().cast(grad.dtype()).reshape([1usize; D]);
        self.grads
            .register::<B::InnerBackend, D>(param.id, grad.mul(factor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficient_is_pytorch_formula() {
        assert_eq!(clip_coefficient(0.5, 1.0), 1.0);
        let norm = (48.0f64).sqrt();
        assert!((clip_coefficient(norm, 1.0) - 1.0 / (norm + 1e-6)).abs() < 1e-15);
        assert_eq!(clip_coefficient(0.0, 1.0), 1.0);
        // torch.clamp keeps a NaN, and an infinite norm zeroes the factor.
        assert!(clip_coefficient(f64::NAN, 1.0).is_nan());
        assert_eq!(clip_coefficient(f64::INFINITY, 1.0), 0.0);
    }

    #[test]
    fn thresholds_must_be_positive() {
        assert!(GradientClipping::Norm { max_norm: 1.0 }.validate().is_ok());
        let error = GradientClipping::Value { max_abs: -1.0 }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("clipping.max_abs"), "{error}");
        assert!(
            GradientClipping::Norm {
                max_norm: f64::INFINITY
            }
            .validate()
            .is_err()
        );
    }
}
