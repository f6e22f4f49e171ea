//! A sampler that keeps the layout order: a reference for the real samplers' tests.

use kiln_ml_core::{BlockLayout, Error, Plan, PlanRequest, Result, Sampler};

/// Emits samples in layout order, sharded by kiln's rule (see [`Plan`]); the tail that does not
/// fill a whole global batch is dropped when there is more than one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InOrderSampler {
    batch_size: u64,
}

impl InOrderSampler {
    /// A sampler sharding with this per-rank batch size.
    pub fn new(batch_size: u64) -> Self {
        Self { batch_size }
    }
}

impl Sampler for InOrderSampler {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        if self.batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        let samples = layout.num_samples();
        if samples == 0 {
            return Err(Error::EmptyLayout);
        }
        let world = u64::from(request.shard.world());
        let rank = u64::from(request.shard.rank());
        let order = if world == 1 {
            (0..samples).collect()
        } else {
            let global_batch = self.batch_size * world;
            let batches = samples / global_batch;
            if batches == 0 {
                return Err(Error::TooFewSamples {
                    samples,
                    world: request.shard.world(),
                });
            }
            (0..batches)
                .flat_map(|batch| {
                    let start = batch * global_batch + rank * self.batch_size;
                    start..start + self.batch_size
                })
                .collect()
        };
        Plan::new(request.epoch, request.shard, self.batch_size, order, layout)
    }
}
