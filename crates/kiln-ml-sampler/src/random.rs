//! A uniform random permutation of all samples: the shuffle-quality reference.

use kiln_ml_core::{BlockLayout, Fingerprint, Result, SampleId};

use crate::order::GlobalOrder;
use crate::rng::{PlanRng, Purpose};
use crate::sharded::Sharded;
use crate::sharding::Sharding;

/// Emits a uniformly random permutation of all samples, sharded over ranks: the
/// [`RandomOrder`] in a [`Sharded`].
///
/// The best possible mixing, and the worst reading pattern: nearly every sample comes from a
/// different block, so a loader must hold almost every block for the whole epoch or read each
/// block many times. Use it as the reference that [`quality`](crate::quality) compares against,
/// or when the whole dataset fits in memory.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::RandomSampler;
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[50, 50]);
/// let layout = builder.build()?;
/// let plan = RandomSampler::default().plan(&layout, &PlanRequest::new(7, 0))?;
/// let mut seen = plan.order().to_vec();
/// seen.sort_unstable();
/// assert_eq!(seen, (0..100).collect::<Vec<_>>());
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub type RandomSampler = Sharded<RandomOrder>;

impl RandomSampler {
    /// A random sampler sharding by `sharding`; [`Default`] uses [`Sharding::default`]
    /// (batch size 1, drop the remainder).
    pub fn new(sharding: Sharding) -> Self {
        Sharded::wrap(RandomOrder, sharding)
    }
}

/// A uniform random permutation of `0..num_samples` (Fisher-Yates on a ChaCha8 stream seeded by
/// the run seed and epoch); it depends only on the number of samples, the seed and the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RandomOrder;

impl GlobalOrder for RandomOrder {
    fn global_order(
        &self,
        layout: &dyn BlockLayout,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<SampleId>> {
        let mut order: Vec<SampleId> = (0..layout.num_samples()).collect();
        PlanRng::new(seed, epoch, Purpose::Permutation).shuffle(&mut order);
        Ok(order)
    }

    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        Some(Fingerprint::of_bytes(b"kiln-sampler random order v1"))
    }

    fn is_permutation(&self) -> bool {
        true
    }
}
