//! `SizeBudgetSampler<O>`: any global order cut into size-budget batches and sharded by batch.

use std::sync::Arc;

use kiln_ml_core::{BlockLayout, Error, Fingerprint, Plan, PlanRequest, Result, Sampler};

use super::budget::SizeBudget;
use super::sharding::shard_batches;
use crate::order::GlobalOrder;
use crate::permutation::{Claim, check_order};
use crate::sharding::RemainderPolicy;

/// A [`GlobalOrder`] cut into batches by a [`SizeBudget`] instead of a fixed count, then sharded
/// batch by batch: rank `r` takes the `r`-th batch of each run of `world` (a [`Plan`] with
/// [batch ends](Plan::with_batch_ends)). Positions are the ends of runs, so resume, sharding
/// and the data key stay exact: every batch is an exact set of samples, a function of the seed,
/// the epoch, the layout, the sizes and the settings alone.
///
/// The [`RemainderPolicy`] applies to the last run when it holds fewer than `world` batches:
/// `Drop` drops it, `Pad` repeats the last full run's batches (the last first) to fill it,
/// `Uneven` leaves some ranks one batch short.
///
/// [`BlockShuffleConfig::length_aware`](crate::BlockShuffleConfig::length_aware) builds the
/// length-aware block shuffle: this sampler over the block shuffle, grouping by length within
/// its shuffle buffer.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::{RemainderPolicy, SequentialOrder, SizeBudget, SizeBudgetSampler};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"events"), &[6]);
/// let layout = builder.build()?;
/// let sizes = vec![5, 5, 2, 2, 2, 2];
/// let budget = SizeBudget { budget: 10, padded: false, window: 0 };
/// let sampler = SizeBudgetSampler::new(SequentialOrder, budget, sizes, RemainderPolicy::Uneven)?;
/// let plan = sampler.plan(&layout, &PlanRequest::new(1, 0))?;
/// assert_eq!(plan.batch_count(), 2);
/// assert_eq!(plan.batch_range(1), 2..6); // four samples of 2 fit a budget of 10
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SizeBudgetSampler<O> {
    order: O,
    budget: SizeBudget,
    sizes: Arc<[u64]>,
    sizes_fingerprint: Fingerprint,
    remainder: RemainderPolicy,
}

impl<O> SizeBudgetSampler<O> {
    /// Cuts `order`'s epochs by `budget`, with `sizes[sample]` each sample's size (in sample-id
    /// order, one per sample of the layouts it will plan: for Parquet,
    /// `ParquetSourceBuilder::sample_sizes`). Fails on a zero budget.
    pub fn new(
        order: O,
        budget: SizeBudget,
        sizes: impl Into<Arc<[u64]>>,
        remainder: RemainderPolicy,
    ) -> Result<Self> {
        budget.validate()?;
        let sizes = sizes.into();
        let sizes_fingerprint = sizes
            .iter()
            .fold(
                Fingerprint::builder()
                    .str("kiln sample sizes")
                    .u64(sizes.len() as u64),
                |builder, &size| builder.u64(size),
            )
            .finish();
        Ok(Self {
            order,
            budget,
            sizes,
            sizes_fingerprint,
            remainder,
        })
    }

    /// The global order being cut.
    pub fn order(&self) -> &O {
        &self.order
    }

    /// The budget.
    pub fn budget(&self) -> SizeBudget {
        self.budget
    }

    /// The samples' sizes, in sample-id order.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// What happens to a last run of fewer than `world` batches.
    pub fn remainder(&self) -> RemainderPolicy {
        self.remainder
    }
}

impl<O: GlobalOrder> Sampler for SizeBudgetSampler<O> {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        kiln_ml_core::validate_layout(layout)?;
        let samples = layout.num_samples();
        if self.sizes.len() as u64 != samples {
            return Err(Error::InvalidConfig(format!(
                "size-budget batches: sizes are given for {} samples, but the layout has {samples}",
                self.sizes.len()
            )));
        }
        if samples == 0 {
            return Err(Error::EmptyLayout);
        }
        let order = self
            .order
            .global_order(layout, request.seed, request.epoch)?;
        let claim = Claim::of(self.order.is_permutation());
        check_order(&order, samples, "size-budget batches", claim)?;
        let batches = self
            .budget
            .batches(&order, &self.sizes, request.seed, request.epoch)?;
        shard_batches(batches, self.remainder, layout, request)
    }

    /// The order's settings, the budget, the remainder policy and the sizes. The batches do not
    /// depend on the world size, so this is also the stream fingerprint.
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        let builder = Fingerprint::builder()
            .str("kiln-sampler size-budget")
            .u64(1)
            .u64(self.budget.budget)
            .u64(u64::from(self.budget.padded))
            .u64(self.budget.window as u64)
            .str(self.remainder.stream_tag())
            .fingerprint(self.sizes_fingerprint);
        // Pads from the last full run since this tag (from the epoch's last batches before):
        // a resume across the change is refused, not served another padding.
        let builder = if self.remainder == RemainderPolicy::Pad {
            builder.str("pad from the last full run")
        } else {
            builder
        };
        Some(
            builder
                .optional_fingerprint(self.order.settings_fingerprint())
                .finish(),
        )
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Layout, Position, Result, Shard};
    use proptest::prelude::*;

    use super::*;
    use crate::test_orders::OrderFn;
    use crate::{BlockShuffleConfig, RandomOrder};

    fn layout(files: u64, rows: u64) -> Layout {
        let mut builder = Layout::builder();
        for file in 0..files {
            builder.add_file(
                Fingerprint::builder().u64(file).finish(),
                &[rows, rows / 2 + 1],
            );
        }
        builder.build().unwrap()
    }

    /// A length-aware block shuffle over `layout` (3 open blocks, windows of 16) with sizes in
    /// 0..97 drawn from `seed`.
    fn length_aware(
        layout: &Layout,
        seed: u64,
        remainder: RemainderPolicy,
        budget: u64,
        padded: bool,
    ) -> SizeBudgetSampler<crate::BlockShuffleOrder> {
        let sizes: Vec<u64> = (0..layout.num_samples())
            .map(|sample| (sample * 2_654_435_761 + seed) % 97)
            .collect();
        BlockShuffleConfig::default()
            .with_open_blocks(3)
            .with_buffer_samples(16)
            .with_remainder(remainder)
            .length_aware(budget, padded, sizes)
            .unwrap()
    }

    /// Epoch `epoch` of run `seed` for rank `rank` of `world`.
    fn request(seed: u64, epoch: u64, rank: u32, world: u32) -> PlanRequest {
        PlanRequest::new(seed, epoch).with_shard(Shard::new(rank, world).unwrap())
    }

    #[test]
    fn sizes_that_do_not_match_the_layout_are_refused() {
        let budget = SizeBudget {
            budget: 10,
            padded: false,
            window: 0,
        };
        let sampler =
            SizeBudgetSampler::new(RandomOrder, budget, vec![1; 3], RemainderPolicy::Drop).unwrap();
        let error = sampler
            .plan(&layout(1, 4), &PlanRequest::new(0, 0))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("sizes are given for 3 samples, but the layout has 7")
        );
    }

    #[test]
    fn the_fingerprint_names_the_sizes_and_the_budget() {
        let budget = SizeBudget {
            budget: 10,
            padded: false,
            window: 4,
        };
        let fingerprint = |budget, sizes: Vec<u64>| {
            SizeBudgetSampler::new(RandomOrder, budget, sizes, RemainderPolicy::Drop)
                .unwrap()
                .settings_fingerprint()
        };
        let base = fingerprint(budget, vec![1, 2, 3]);
        assert_eq!(base, fingerprint(budget, vec![1, 2, 3]));
        assert_ne!(base, fingerprint(budget, vec![1, 2, 4]));
        assert_ne!(
            base,
            fingerprint(
                SizeBudget {
                    padded: true,
                    ..budget
                },
                vec![1, 2, 3]
            )
        );
        assert_ne!(
            base,
            fingerprint(
                SizeBudget {
                    window: 5,
                    ..budget
                },
                vec![1, 2, 3]
            )
        );
    }

    proptest! {
        /// Under `Drop` and `Pad` every rank gets the same number of batches (so collectives
        /// cannot hang), `Pad` covers every sample, `Drop` none twice; and a position saved on
        /// `world` ranks at a run end that is also one of `world2` ranks resumes there exactly.
        #[test]
        fn drop_and_pad_give_every_rank_as_many_batches_and_resume_on_other_worlds(
            files in 1u64..6,
            rows in 4u64..40,
            world in 1u32..5,
            world2 in 1u32..5,
            budget in 1u64..300,
            pad in any::<bool>(),
            seed in 0u64..1000,
        ) {
            let layout = layout(files, rows);
            let remainder = if pad { RemainderPolicy::Pad } else { RemainderPolicy::Drop };
            let sampler = length_aware(&layout, seed, remainder, budget, true);
            let request = |rank, world| request(seed, 2, rank, world);
            let plans: Vec<Plan> = match (0..world)
                .map(|rank| sampler.plan(&layout, &request(rank, world)))
                .collect::<Result<Vec<_>>>()
            {
                Ok(plans) => plans,
                // Too few batches for the ranks under Drop: refused with a reason.
                Err(error) => {
                    prop_assert!(!pad && error.to_string().contains("fewer than the"), "{}", error);
                    return Ok(());
                }
            };
            let count = plans[0].batch_count();
            prop_assert!(plans.iter().all(|plan| plan.batch_count() == count));
            let mut all: Vec<u64> = plans.iter().flat_map(|plan| plan.order().to_vec()).collect();
            all.sort_unstable();
            let distinct = {
                let mut distinct = all.clone();
                distinct.dedup();
                distinct
            };
            if pad {
                prop_assert_eq!(distinct.len() as u64, layout.num_samples());
            } else {
                prop_assert_eq!(distinct.len(), all.len());
            }
            // Every run end of `world` ranks that is also a run end of `world2` ranks.
            let ends2: Vec<Position> = match sampler.plan(&layout, &request(0, world2)) {
                Ok(plan) => (0..plan.batch_count())
                    .filter(|&batch| plan.batch_range(batch).end < plan.len() as u64)
                    .map(|batch| plan.position_after(plan.batch_range(batch).end).unwrap())
                    .collect(),
                // Too few batches for `world2` ranks under Drop: nothing to resume there.
                Err(error) => {
                    prop_assert!(!pad && error.to_string().contains("fewer than the"), "{}", error);
                    Vec::new()
                }
            };
            for batch in 0..count {
                let end = plans[0].batch_range(batch).end;
                if end == plans[0].len() as u64 {
                    continue;
                }
                let position = plans[0].position_after(end).unwrap();
                if !ends2.contains(&position) {
                    continue;
                }
                for rank in 0..world2 {
                    let full = sampler.plan(&layout, &request(rank, world2)).unwrap();
                    let resumed = sampler.resume(&layout, &request(rank, world2), position).unwrap();
                    let skipped = full.batch_range(resumed.batches_skipped()).start as usize;
                    prop_assert_eq!(resumed.order(), &full.order()[skipped..]);
                    prop_assert_eq!(
                        full.position_after(skipped as u64).unwrap(),
                        position
                    );
                }
            }
        }

        /// Over all ranks, every sample exactly once (`Uneven`); each rank resumed after any of
        /// its batches emits exactly the rest of its uninterrupted plan, and all ranks agree on
        /// the position after their k-th batch.
        #[test]
        fn ranks_cover_the_epoch_once_and_resume_exactly(
            files in 1u64..6,
            rows in 1u64..40,
            world in 1u32..4,
            budget in 1u64..300,
            padded in any::<bool>(),
            seed in 0u64..1000,
        ) {
            let layout = layout(files, rows);
            let sampler = length_aware(&layout, seed, RemainderPolicy::Uneven, budget, padded);
            prop_assume!(world as u64 <= layout.num_samples());
            let plans: Vec<Plan> = (0..world)
                .map(|rank| sampler.plan(&layout, &request(seed, 1, rank, world)).unwrap())
                .collect();
            let mut all: Vec<u64> = plans.iter().flat_map(|plan| plan.order().to_vec()).collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..layout.num_samples()).collect::<Vec<_>>());
            for (rank, plan) in plans.iter().enumerate() {
                let request = request(seed, 1, rank as u32, world);
                for batch in 0..plan.batch_count() {
                    let end = plan.batch_range(batch).end;
                    let position = plan.position_after(end).unwrap();
                    if end < plan.len() as u64 {
                        let other = &plans[(rank + 1) % plans.len()];
                        if batch < other.batch_count() && other.batch_range(batch).end < other.len() as u64 {
                            prop_assert_eq!(other.position_after(other.batch_range(batch).end).unwrap(), position);
                        }
                        let resumed = sampler.resume(&layout, &request, position).unwrap();
                        prop_assert_eq!(resumed.order(), &plan.order()[end as usize..]);
                        prop_assert_eq!(resumed.batches_skipped(), batch + 1);
                    }
                }
            }
        }
    }

    #[test]
    fn an_order_that_misses_samples_is_refused() {
        let layout = layout(1, 6);
        let budget = SizeBudget {
            budget: 10,
            padded: false,
            window: 0,
        };
        let sizes = vec![1; layout.num_samples() as usize];
        // Leaves out the last sample.
        let all_but_last = OrderFn(|samples| (0..samples - 1).collect());
        let sampler =
            SizeBudgetSampler::new(all_but_last, budget, sizes, RemainderPolicy::Uneven).unwrap();
        let error = sampler.plan(&layout, &request(0, 0, 0, 1)).unwrap_err();
        assert!(
            error.to_string().contains("must hold every sample once"),
            "{error}"
        );
        let sizes = vec![1; layout.num_samples() as usize];
        // The right length, but sample 0 twice and sample 1 missing.
        let repeats_the_first = OrderFn(|samples| {
            [0].into_iter()
                .chain(0..samples)
                .filter(|&id| id != 1)
                .collect()
        });
        let sampler =
            SizeBudgetSampler::new(repeats_the_first, budget, sizes, RemainderPolicy::Uneven)
                .unwrap();
        let error = sampler.plan(&layout, &request(0, 0, 0, 1)).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("sample 0 twice (positions 0 and 1)"),
            "{error}"
        );
    }
}
