//! The `Sampler` seam: a pure function from a layout and a request to an epoch plan.

use std::sync::Arc;

use crate::{BlockLayout, Error, Fingerprint, Plan, PlanRequest, Position, Result};

/// Builds epoch plans.
///
/// A sampler is a pure function of (layout, seed, epoch, shard): no I/O, no hidden state, no
/// dependence on worker count or timing, so the same request always gives the same plan and a
/// run can be resumed from a [`Position`] alone. Only [`plan`](Sampler::plan) is required.
///
/// ```
/// use kiln_ml_core::{BlockLayout, Fingerprint, Layout, Plan, PlanRequest, Result, Sampler};
///
/// /// Emits every sample in reverse order.
/// struct Reverse;
///
/// impl Sampler for Reverse {
///     fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
///         let order = (0..layout.num_samples()).rev().collect();
///         Plan::new(request.epoch, request.shard, 1, order, layout)
///     }
/// }
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"f"), &[2, 2]);
/// let layout = builder.build().unwrap();
/// let plan = Reverse.plan(&layout, &PlanRequest::new(7, 0)).unwrap();
/// assert_eq!(plan.order(), &[3, 2, 1, 0]);
/// assert_eq!(plan.schedule()[0].block, 1);
/// ```
pub trait Sampler: Send + Sync {
    /// The plan for one epoch of one shard.
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan>;

    /// The rest of an epoch's plan after `position`: identical to the suffix an uninterrupted
    /// run would emit.
    fn resume(
        &self,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
        position: Position,
    ) -> Result<Plan> {
        if position.epoch != request.epoch {
            return Err(Error::InvalidPosition {
                position,
                plan_epoch: request.epoch,
                reason: "the request is for another epoch".to_owned(),
            });
        }
        self.plan(layout, request)?.skip_to(position)
    }

    /// A fingerprint of the settings that shape this sampler's plans (batch size, remainder
    /// policy, shuffle parameters), saved with a resume position so that resuming under other
    /// settings is refused instead of silently repeating or skipping samples (see
    /// [`data_key`](crate::data_key)). The default, `None`, leaves the settings out of that
    /// check.
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        None
    }

    /// The settings as they shape the global stream `request` belongs to: what
    /// [`data_key`](crate::data_key) saves with a position. The default is
    /// [`settings_fingerprint`](Sampler::settings_fingerprint); a sharding sampler names the
    /// global batch (per-rank batch × world) instead of the per-rank one, so a position saved on
    /// W ranks resumes on W' ranks with the same global batch without being taken for other data.
    fn stream_fingerprint(&self, request: &PlanRequest) -> Option<Fingerprint> {
        let _ = request;
        self.settings_fingerprint()
    }
}

impl<T: Sampler + ?Sized> Sampler for &T {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        (**self).plan(layout, request)
    }
    fn resume(
        &self,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
        position: Position,
    ) -> Result<Plan> {
        (**self).resume(layout, request, position)
    }
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        (**self).settings_fingerprint()
    }
    fn stream_fingerprint(&self, request: &PlanRequest) -> Option<Fingerprint> {
        (**self).stream_fingerprint(request)
    }
}

impl<T: Sampler + ?Sized> Sampler for Box<T> {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        (**self).plan(layout, request)
    }
    fn resume(
        &self,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
        position: Position,
    ) -> Result<Plan> {
        (**self).resume(layout, request, position)
    }
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        (**self).settings_fingerprint()
    }
    fn stream_fingerprint(&self, request: &PlanRequest) -> Option<Fingerprint> {
        (**self).stream_fingerprint(request)
    }
}

impl<T: Sampler + ?Sized> Sampler for Arc<T> {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        (**self).plan(layout, request)
    }
    fn resume(
        &self,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
        position: Position,
    ) -> Result<Plan> {
        (**self).resume(layout, request, position)
    }
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        (**self).settings_fingerprint()
    }
    fn stream_fingerprint(&self, request: &PlanRequest) -> Option<Fingerprint> {
        (**self).stream_fingerprint(request)
    }
}
