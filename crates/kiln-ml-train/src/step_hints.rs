//! What the trainer tells kiln's fused optimizers about a step, beside the gradients.
//!
//! The trainer is generic over Burn's `Optimizer` trait, whose `step` takes a learning rate, a
//! module and gradients only. kiln's fused optimizers ([`FusedAdam`](crate::FusedAdam),
//! [`FusedSgd`](crate::FusedSgd)) can do more in the same few kernels: multiply the gradients
//! by the unscale factor, clip them by their global norm (one reduction over their flat
//! buckets) and keep the parameters in those buckets from one step to the next. The trainer
//! offers these hints on its thread just before `step` and withdraws them after; a fused
//! optimizer takes them, any other optimizer leaves them, and the trainer learns from that
//! which kind it drives (through wrappers too, such as an enum over several optimizers). Until
//! it knows, it unscales and clips the gradients itself, as for any optimizer.
//!
//! When the trainer must read the gradients' norm back before the step (f16's finiteness check,
//! a tracked norm), it lays a fused optimizer's gradients out in its flat buckets itself, takes
//! the norm over the buckets, and offers the buckets with the hints: the optimizer then uses
//! them as they are, so the check costs one reduction per bucket, not one per tensor.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// The next model generation handed out in this process.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A model generation no other trainer of this process has used: a fused optimizer cloned from
/// one trainer into another must not take its kept buckets for the new trainer's model, though
/// the parameter ids may match (a rolled-back copy, weights mapped in place).
pub(crate) fn fresh_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// The trainer's hints for one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepHints {
    /// Multiply every gradient by this (loss unscaling and normalization; a host-computed
    /// clipping coefficient folded in), before any clipping below.
    pub(crate) factor: f64,
    /// Clip the gradients, once multiplied, to this global norm, on the device.
    pub(crate) max_norm: Option<f64>,
    /// Changes whenever the trainer's model changed other than through the optimizer (a
    /// checkpoint loaded, weights broadcast): parameters kept from the last step are stale.
    pub(crate) generation: u64,
}

impl StepHints {
    /// Hints that ask nothing of the optimizer: the trainer already scaled and clipped.
    pub(crate) fn nothing(generation: u64) -> Self {
        Self {
            factor: 1.0,
            max_norm: None,
            generation,
        }
    }
}

thread_local! {
    static OFFERED: Cell<Option<StepHints>> = const { Cell::new(None) };
    static OFFERED_GRADS: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Offers `hints`, and the gradients already in buckets if any, to the optimizer step about to
/// run on this thread. Whatever an earlier offer left (a step that panicked) is replaced.
pub(crate) fn offer<T: Any>(hints: StepHints, grads: Option<T>) {
    OFFERED.with(|offered| offered.set(Some(hints)));
    OFFERED_GRADS.with(|offered| {
        *offered.borrow_mut() = grads.map(|grads| Box::new(grads) as Box<dyn Any>);
    });
}

/// Takes the hints offered for this step, if any (a fused optimizer, in its `step`).
pub(crate) fn take() -> Option<StepHints> {
    OFFERED.with(Cell::take)
}

/// Takes the gradients offered for this step when they are a `T` (a fused optimizer, in its
/// `step`, with its backend's bucket type).
pub(crate) fn take_grads<T: Any>() -> Option<T> {
    let offered = OFFERED_GRADS.with(|offered| offered.borrow_mut().take())?;
    offered.downcast::<T>().ok().map(|grads| *grads)
}

/// Withdraws what is left of the offer after the step: `true` when the optimizer took it.
pub(crate) fn withdraw() -> bool {
    OFFERED_GRADS.with(|offered| offered.borrow_mut().take());
    OFFERED.with(Cell::take).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_is_taken_once_and_withdrawn_after_the_step() {
        let hints = StepHints {
            factor: 0.5,
            max_norm: Some(1.0),
            generation: 3,
        };
        offer::<()>(hints, None);
        assert_eq!(take(), Some(hints));
        assert_eq!(take(), None);
        assert!(withdraw(), "taken");
        offer::<()>(StepHints::nothing(3), None);
        assert!(!withdraw(), "left by the optimizer");
        assert_eq!(take(), None, "withdrawn");
    }

    #[test]
    fn offered_gradients_are_taken_once_by_type_and_withdrawn_with_the_hints() {
        let hints = StepHints::nothing(0);
        offer(hints, Some(vec![1.0_f32, 2.0]));
        assert_eq!(take_grads::<Vec<f64>>(), None, "another type takes nothing");
        assert_eq!(
            take_grads::<Vec<f32>>(),
            None,
            "a wrong take drops the offer"
        );
        offer(hints, Some(vec![1.0_f32, 2.0]));
        assert_eq!(take_grads::<Vec<f32>>(), Some(vec![1.0, 2.0]));
        assert_eq!(take_grads::<Vec<f32>>(), None);
        offer(hints, Some(7_u8));
        assert!(!withdraw());
        assert_eq!(take_grads::<u8>(), None, "withdrawn");
        // A later offer without gradients replaces what a panicked step left.
        offer(hints, Some(7_u8));
        offer::<u8>(hints, None);
        assert_eq!(take_grads::<u8>(), None, "replaced");
    }
}
