//! The layout order, sharded: the fastest to read and the worst mixed.

use kiln_core::{BlockLayout, Plan, PlanRequest, Result, SampleId, Sampler};

use crate::Sharding;

/// Emits samples in layout order (file by file, block by block, row by row), sharded over ranks.
///
/// Every read is sequential, but each batch comes from one or two files: use it for evaluation
/// and as the speed reference, not for training.
///
/// ```
/// use kiln_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_sampler::SequentialSampler;
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[2, 3]);
/// let layout = builder.build()?;
/// let plan = SequentialSampler::default().plan(&layout, &PlanRequest::new(0, 0))?;
/// assert_eq!(plan.order(), &[0, 1, 2, 3, 4]);
/// # Ok::<(), kiln_sampler::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SequentialSampler {
    sharding: Sharding,
}

impl SequentialSampler {
    /// A sequential sampler sharding by `sharding`; [`Default`] uses [`Sharding::default`]
    /// (batch size 1, drop the remainder).
    pub fn new(sharding: Sharding) -> Self {
        Self { sharding }
    }

    /// The sharding configuration.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// The epoch's global order before sharding: `0..num_samples`.
    pub fn global_order(&self, layout: &dyn BlockLayout) -> Vec<SampleId> {
        (0..layout.num_samples()).collect()
    }
}

impl Sampler for SequentialSampler {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        // Fail on the layout and the sharding before building the order.
        self.sharding.check(layout, request)?;
        self.sharding
            .plan(self.global_order(layout), layout, request)
    }
}
