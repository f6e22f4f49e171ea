//! The layout order, sharded: the fastest to read and the worst mixed.

use kiln_ml_core::{BlockLayout, Fingerprint, Result, SampleId};

use crate::order::GlobalOrder;
use crate::sharded::Sharded;
use crate::sharding::Sharding;

/// Emits samples in layout order (file by file, block by block, row by row), sharded over ranks:
/// the [`SequentialOrder`] in a [`Sharded`].
///
/// Every read is sequential, but each batch comes from one or two files: use it for evaluation
/// and as the speed reference, not for training.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::SequentialSampler;
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[2, 3]);
/// let layout = builder.build()?;
/// let plan = SequentialSampler::default().plan(&layout, &PlanRequest::new(0, 0))?;
/// assert_eq!(plan.order(), &[0, 1, 2, 3, 4]);
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub type SequentialSampler = Sharded<SequentialOrder>;

impl SequentialSampler {
    /// A sequential sampler sharding by `sharding`; [`Default`] uses [`Sharding::default`]
    /// (batch size 1, drop the remainder). On `W` ranks that drops the same last `N mod W`
    /// samples in every epoch: to evaluate on every sample, use
    /// [`RemainderPolicy::Uneven`](crate::RemainderPolicy::Uneven), whose ranks may run one
    /// batch fewer (so no collective call per batch).
    pub fn new(sharding: Sharding) -> Self {
        Sharded::wrap(SequentialOrder, sharding)
    }
}

/// The layout order: `0..num_samples`, the same for every seed and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SequentialOrder;

impl GlobalOrder for SequentialOrder {
    fn global_order(&self, layout: &dyn BlockLayout, _: u64, _: u64) -> Result<Vec<SampleId>> {
        Ok((0..layout.num_samples()).collect())
    }

    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        Some(Fingerprint::of_bytes(b"kiln-sampler sequential order v1"))
    }

    fn is_permutation(&self) -> bool {
        true
    }
}
