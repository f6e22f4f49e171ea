//! A uniform random permutation of all samples: the shuffle-quality reference.

use kiln_core::{BlockLayout, Error, Plan, PlanRequest, Result, SampleId, Sampler};

use crate::Sharding;
use crate::rng::{PlanRng, Purpose};

/// Emits a uniformly random permutation of all samples (Fisher-Yates on a ChaCha8 stream seeded
/// by the run seed and epoch), sharded over ranks.
///
/// The best possible mixing, and the worst reading pattern: nearly every sample comes from a
/// different block, so a loader must hold almost every block for the whole epoch or read each
/// block many times. Use it as the reference that [`quality`](crate::quality) compares against,
/// or when the whole dataset fits in memory.
///
/// ```
/// use kiln_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_sampler::RandomSampler;
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[50, 50]);
/// let layout = builder.build()?;
/// let plan = RandomSampler::default().plan(&layout, &PlanRequest::new(7, 0))?;
/// let mut seen = plan.order().to_vec();
/// seen.sort_unstable();
/// assert_eq!(seen, (0..100).collect::<Vec<_>>());
/// # Ok::<(), kiln_sampler::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RandomSampler {
    sharding: Sharding,
}

impl RandomSampler {
    /// A random sampler sharding by `sharding`; [`Default`] uses [`Sharding::default`]
    /// (batch size 1, drop the remainder).
    pub fn new(sharding: Sharding) -> Self {
        Self { sharding }
    }

    /// The sharding configuration.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// The epoch's global order before sharding: a permutation of `0..num_samples` that depends
    /// only on the number of samples, the seed and the epoch.
    pub fn global_order(
        &self,
        layout: &dyn BlockLayout,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<SampleId>> {
        let samples = layout.num_samples();
        if samples == 0 {
            return Err(Error::EmptyLayout);
        }
        let mut order: Vec<SampleId> = (0..samples).collect();
        PlanRng::new(seed, epoch, Purpose::Permutation).shuffle(&mut order);
        Ok(order)
    }
}

impl Sampler for RandomSampler {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        // Fail on the layout and the sharding before building the order.
        self.sharding.check(layout, request)?;
        let order = self.global_order(layout, request.seed, request.epoch)?;
        self.sharding.plan(order, layout, request)
    }
}
