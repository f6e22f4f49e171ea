//! `Sharded<O>`: any global order as a sampler, cut over data-parallel ranks.

use kiln_ml_core::{BlockLayout, Fingerprint, Plan, PlanRequest, Result, Sampler};

use crate::order::GlobalOrder;
use crate::permutation::Claim;
use crate::sharding::Sharding;

/// A [`GlobalOrder`] sharded over ranks by a [`Sharding`]: the one place where kiln's samplers
/// check a request, build the epoch's global order and cut it into the requested rank's plan.
///
/// [`SequentialSampler`](crate::SequentialSampler), [`RandomSampler`](crate::RandomSampler) and
/// [`BlockShuffleSampler`](crate::BlockShuffleSampler) are this wrapper around their orders;
/// wrap an order of your own with [`wrap`](Self::wrap). Resuming is
/// [`Sampler::resume`]'s default: regenerate the plan, skip the consumed prefix of the global
/// order.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler, Shard};
/// use kiln_ml_sampler::{RemainderPolicy, Sharded, Sharding, SequentialOrder, SequentialSampler};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[6]);
/// let layout = builder.build()?;
/// let sharding = Sharding::new(1, RemainderPolicy::Drop);
/// let sampler = Sharded::wrap(SequentialOrder, sharding);
/// assert_eq!(sampler, SequentialSampler::new(sharding));
/// let rank1 = PlanRequest::new(0, 0).with_shard(Shard::new(1, 3)?);
/// assert_eq!(sampler.plan(&layout, &rank1)?.order(), &[1, 4]);
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sharded<O> {
    order: O,
    sharding: Sharding,
}

impl<O> Sharded<O> {
    /// Shards `order` by `sharding`. The sharding is checked when planning (a zero batch size is
    /// refused there with [`Error::ZeroBatchSize`](kiln_ml_core::Error::ZeroBatchSize)).
    pub fn wrap(order: O, sharding: Sharding) -> Self {
        Self { order, sharding }
    }

    /// The global order being sharded.
    pub fn order(&self) -> &O {
        &self.order
    }

    /// The sharding configuration.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }

    /// The global order, unwrapped.
    pub fn into_order(self) -> O {
        self.order
    }
}

impl<O: GlobalOrder> Sampler for Sharded<O> {
    fn plan(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<Plan> {
        // Fail on the layout and the sharding before spending time on the order.
        self.sharding.check(layout, request)?;
        let order = self
            .order
            .global_order(layout, request.seed, request.epoch)?;
        let claim = Claim::of(self.order.is_permutation());
        self.sharding.plan_claimed(order, layout, request, claim)
    }

    /// The order's settings (when it reports them) and the batch size and remainder policy.
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint_with_batch(self.sharding.batch_size)
    }

    /// As [`settings_fingerprint`](Self::settings_fingerprint), with the global batch in place
    /// of the per-rank one: the global order and its cut into global batches (the tail dropped
    /// or padded) depend on nothing else, so W ranks at batch b and W' at b·W/W' read one stream.
    fn stream_fingerprint(&self, request: &PlanRequest) -> Option<Fingerprint> {
        let world = u64::from(request.shard.world());
        self.fingerprint_with_batch(self.sharding.batch_size.saturating_mul(world))
    }
}

impl<O: GlobalOrder> Sharded<O> {
    /// The settings fingerprint with `batch` as the batch size (one rank: the two agree).
    fn fingerprint_with_batch(&self, batch: u64) -> Option<Fingerprint> {
        let builder = Fingerprint::builder()
            .str("kiln-sampler sharded")
            .u64(1)
            .u64(batch)
            .str(self.sharding.remainder.stream_tag());
        Some(
            builder
                .optional_fingerprint(self.order.settings_fingerprint())
                .finish(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kiln_ml_core::{Fingerprint, Layout, Shard};

    use super::*;
    use crate::test_orders::OrderFn;
    use crate::{
        BlockShuffleConfig, RandomOrder, RandomSampler, RemainderPolicy, SequentialSampler,
    };

    #[test]
    fn boxed_and_shared_orders_plan_like_the_order_itself() {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"a"), &[7, 5]);
        let layout = builder.build().unwrap();
        let sharding = Sharding::new(2, RemainderPolicy::Pad);
        let request = PlanRequest::new(3, 1).with_shard(Shard::new(1, 2).unwrap());
        let expected = RandomSampler::new(sharding)
            .plan(&layout, &request)
            .unwrap();
        let boxed: Box<dyn GlobalOrder> = Box::new(RandomOrder);
        let shared: Arc<dyn GlobalOrder> = Arc::new(RandomOrder);
        for sampler in [
            Sharded::wrap(boxed, sharding).plan(&layout, &request),
            Sharded::wrap(Arc::clone(&shared), sharding).plan(&layout, &request),
            Sharded::wrap(&RandomOrder, sharding).plan(&layout, &request),
        ] {
            assert_eq!(sampler.unwrap(), expected);
        }
    }

    #[test]
    fn settings_fingerprints_tell_every_setting_apart() {
        let sharding = Sharding::new(4, RemainderPolicy::Drop);
        let block = |config: BlockShuffleConfig| config.init().unwrap().settings_fingerprint();
        let all = [
            SequentialSampler::new(sharding).settings_fingerprint(),
            SequentialSampler::new(Sharding::new(8, RemainderPolicy::Drop)).settings_fingerprint(),
            SequentialSampler::new(Sharding::new(4, RemainderPolicy::Pad)).settings_fingerprint(),
            SequentialSampler::new(Sharding::new(4, RemainderPolicy::Uneven))
                .settings_fingerprint(),
            RandomSampler::new(sharding).settings_fingerprint(),
            block(BlockShuffleConfig::default().with_sharding(sharding)),
            block(
                BlockShuffleConfig::default()
                    .with_sharding(sharding)
                    .with_open_blocks(3),
            ),
            block(
                BlockShuffleConfig::default()
                    .with_sharding(sharding)
                    .with_buffer_samples(7),
            ),
            block(
                BlockShuffleConfig::default()
                    .with_sharding(sharding)
                    .with_stratified(false),
            ),
            block(BlockShuffleConfig::block_order_only().with_sharding(sharding)),
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(a.is_some());
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(
            SequentialSampler::new(sharding).settings_fingerprint(),
            all[0],
            "a function of the settings alone"
        );
    }

    #[test]
    fn the_stream_fingerprint_names_the_global_batch() {
        let request =
            |world: u32| PlanRequest::new(1, 0).with_shard(Shard::new(0, world).expect("valid"));
        let sampler = |batch: u64| {
            BlockShuffleConfig::default()
                .with_sharding(Sharding::new(batch, RemainderPolicy::Drop))
                .init()
                .unwrap()
        };
        let two_at_4 = sampler(4).stream_fingerprint(&request(2));
        assert_eq!(two_at_4, sampler(8).stream_fingerprint(&request(1)));
        assert_eq!(two_at_4, sampler(2).stream_fingerprint(&request(4)));
        assert_ne!(two_at_4, sampler(4).stream_fingerprint(&request(1)));
        // One rank: the stream and the settings agree.
        assert_eq!(
            sampler(8).stream_fingerprint(&request(1)),
            sampler(8).settings_fingerprint()
        );
    }

    #[test]
    fn orders_of_your_own_are_checked_and_kilns_skip_the_pass() {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"a"), &[6]);
        let layout = builder.build().unwrap();
        let sharding = Sharding::new(2, RemainderPolicy::Drop);
        // An order of your own that repeats sample 0 and misses sample 1.
        let repeats = || OrderFn(|samples| [0].into_iter().chain(2..samples).chain([0]).collect());
        let error = Sharded::wrap(repeats(), sharding)
            .plan(&layout, &PlanRequest::new(0, 0))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("sample 0 twice (positions 0 and 5)"),
            "{error}"
        );
        let boxed: Box<dyn GlobalOrder> = Box::new(repeats());
        assert!(!boxed.is_permutation());
        assert!(Arc::new(RandomOrder).is_permutation());
        assert!(crate::SequentialOrder.is_permutation());
        let block_shuffle = BlockShuffleConfig::default().init().unwrap();
        assert!(block_shuffle.order().is_permutation());
    }
}
