//! Sharding one global order over data-parallel ranks, with an explicit remainder policy.

use kiln_ml_core::{BlockLayout, Error, Plan, PlanRequest, Result, SampleId};

use crate::permutation::{Claim, check_order};
use crate::rng::{PlanRng, Purpose};

/// What happens to the tail of the global order that does not fill a whole global batch
/// (`batch_size × world` samples).
///
/// | policy | batches per rank | every sample | use |
/// |---|---|---|---|
/// | `Drop` | `⌊N / G⌋`, all full | at most once (the tail is skipped this epoch) | training |
/// | `Pad` | `⌈N / G⌉`, all full | at least once (some twice; more when `N < G`) | training without loss |
/// | `Uneven` | differs by rank, last batch may be short or missing | exactly once | evaluation |
///
/// With `N` samples and `G = batch_size × world`. With one rank and `batch_size = 1` all three
/// are the same: every sample exactly once.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum RemainderPolicy {
    /// Drop the tail of the epoch's global order so every rank gets the same number of full
    /// batches. The dropped samples change every epoch where the order does (a shuffle); an
    /// order that is the same every epoch ([`SequentialOrder`](crate::SequentialOrder)) drops
    /// the same samples every epoch.
    #[default]
    Drop,
    /// Append `pad = ⌈N / G⌉ × G − N` repeated samples so every rank gets the same number of
    /// full batches. The multiset is: every sample once, plus `pad` distinct samples drawn
    /// (seeded, afresh each epoch) from the epoch's last full global batch (from all `N` when
    /// `N < G`, cycled when `pad > N`). The repeats sit at the end of the epoch, and they come
    /// from blocks the epoch's end reads anyway, so a loader holds few blocks more for them
    /// (repeats drawn from the whole epoch would keep up to `pad` blocks resident from their
    /// first use to the end).
    Pad,
    /// Keep every sample exactly once; the last global batch is split by the sharding rule as
    /// far as it goes, so ranks may get different numbers of samples and batches. For
    /// evaluation only: unequal batch counts hang collective operations in training.
    Uneven,
}

impl RemainderPolicy {
    /// The policy's name, stable across versions (it is part of saved resume keys).
    pub fn name(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Pad => "pad",
            Self::Uneven => "uneven",
        }
    }

    /// What the settings fingerprints record of the policy: its name, revised where the stream
    /// it makes has changed, so that a position saved under the old stream is refused rather
    /// than resumed into different samples (`Pad` drew its repeats from the whole epoch before
    /// 2026-11-28).
    pub(crate) fn stream_tag(self) -> &'static str {
        match self {
            Self::Pad => "pad from the epoch's end",
            other => other.name(),
        }
    }
}

/// How an epoch's global order is cut into per-rank plans: the per-rank batch size and the
/// remainder policy.
///
/// The rule is kiln-ml-core's (see [`Plan`]): the global order is cut into global batches of
/// `batch_size × world` samples and rank `r` takes the `r`-th run of `batch_size` of each. The
/// global order itself never depends on the world size, so a run can resume on another number of
/// ranks exactly when the new global batch divides the consumed count (keep
/// `batch_size × world` fixed, for instance 4 ranks × 64 then 2 ranks × 128).
///
/// ```
/// use kiln_ml_sampler::{RemainderPolicy, Sharding};
///
/// let sharding = Sharding::new(64, RemainderPolicy::Pad);
/// // 1,000 samples in global batches of 64 x 4 = 256: 4 batches per rank, 24 samples repeated.
/// assert_eq!(sharding.batches_per_rank(1000, 4).unwrap(), 4);
/// assert_eq!(Sharding::default(), Sharding::new(1, RemainderPolicy::Drop));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sharding {
    /// Samples per batch on each rank (default 1). Must be at least 1.
    pub batch_size: u64,
    /// What to do with the tail that does not fill a global batch (default [`RemainderPolicy::Drop`]).
    pub remainder: RemainderPolicy,
}

impl Default for Sharding {
    /// Batch size 1 and [`RemainderPolicy::Drop`]: on one rank, every sample exactly once.
    fn default() -> Self {
        Self {
            batch_size: 1,
            remainder: RemainderPolicy::Drop,
        }
    }
}

impl Sharding {
    /// Sharding with this per-rank batch size and remainder policy.
    pub fn new(batch_size: u64, remainder: RemainderPolicy) -> Self {
        Self {
            batch_size,
            remainder,
        }
    }

    /// Checks the batch size.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        Ok(())
    }

    /// The number of batches each rank gets in an epoch of `samples` samples over `world` ranks:
    /// exact for `Drop` and `Pad`; for `Uneven`, the largest count (rank 0's).
    ///
    /// Fails with a clear error for a zero batch size, an empty epoch, more ranks than samples,
    /// or (under `Drop`) fewer samples than one global batch.
    pub fn batches_per_rank(&self, samples: u64, world: u32) -> Result<u64> {
        self.validate()?;
        if samples == 0 {
            return Err(Error::EmptyLayout);
        }
        if u64::from(world) > samples || world == 0 {
            return Err(Error::TooFewSamples { samples, world });
        }
        let global_batch = self.global_batch(world)?;
        let batches = match self.remainder {
            RemainderPolicy::Drop => samples / global_batch,
            RemainderPolicy::Pad | RemainderPolicy::Uneven => samples.div_ceil(global_batch),
        };
        if batches == 0 {
            return Err(Error::TooFewSamples { samples, world });
        }
        Ok(batches)
    }

    /// Checks, before any order is built, what every plan over `layout` for `request` needs: the
    /// layout's blocks tile its sample ids (a custom layout that does not would make the order
    /// wrong) and the sharding fits it (see [`batches_per_rank`](Self::batches_per_rank)).
    /// Returns the batches per rank.
    pub fn check(&self, layout: &dyn BlockLayout, request: &PlanRequest) -> Result<u64> {
        kiln_ml_core::validate_layout(layout)?;
        self.batches_per_rank(layout.num_samples(), request.shard.world())
    }

    /// Cuts an epoch's global order into the plan of the requested rank.
    ///
    /// `global` must be the epoch's full global order (every sample of `layout` once, the same on
    /// every rank); the remainder policy is applied to it here. [`Sharded`](crate::Sharded) calls
    /// this after [`check`](Self::check): implement [`GlobalOrder`](crate::GlobalOrder) and wrap
    /// it to shard an order of your own the way kiln's samplers do.
    ///
    /// The order is checked to hold every sample of `layout` once (one pass over it); an order
    /// that misses, repeats or invents a sample is refused, naming it.
    pub fn plan(
        &self,
        global: Vec<SampleId>,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
    ) -> Result<Plan> {
        self.plan_claimed(global, layout, request, Claim::None)
    }

    /// [`plan`](Self::plan) for an order that makes `claim` about itself: one that claims to be
    /// a permutation ([`GlobalOrder::is_permutation`](crate::GlobalOrder::is_permutation)) has
    /// only its length checked.
    pub(crate) fn plan_claimed(
        &self,
        mut global: Vec<SampleId>,
        layout: &dyn BlockLayout,
        request: &PlanRequest,
        claim: Claim,
    ) -> Result<Plan> {
        let samples = layout.num_samples();
        check_order(&global, samples, "sharding", claim)?;
        let world = request.shard.world();
        let batches = self.batches_per_rank(samples, world)?;
        let global_batch = self.global_batch(world)?;
        match self.remainder {
            RemainderPolicy::Drop => global.truncate((batches * global_batch) as usize),
            RemainderPolicy::Pad => {
                let pad = batches * global_batch - samples;
                // Exactly, or growing the full-size order would double its capacity. A batch far
                // larger than the data asks for more than memory holds: an error, not an abort.
                usize::try_from(pad)
                    .ok()
                    .and_then(|pad| global.try_reserve_exact(pad).ok())
                    .ok_or_else(|| {
                        Error::InvalidConfig(format!(
                            "padding {samples} samples to a whole global batch of {global_batch} \
                             (batch_size {} x world {world}) needs {pad} repeats, more than \
                             memory holds: lower batch_size",
                            self.batch_size
                        ))
                    })?;
                let repeats = pad_samples(&global, global_batch, pad, request.seed, request.epoch);
                global.extend(repeats);
            }
            RemainderPolicy::Uneven => {}
        }
        let local = take_rank(global, self.batch_size, request.shard.rank(), world);
        Plan::new(request.epoch, request.shard, self.batch_size, local, layout)
    }

    fn global_batch(&self, world: u32) -> Result<u64> {
        self.batch_size
            .checked_mul(u64::from(world))
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "batch_size {} x world {world} overflows u64",
                    self.batch_size
                ))
            })
    }
}

/// Keeps rank `rank`'s runs of `batch_size` of every global batch, in place.
fn take_rank(mut order: Vec<SampleId>, batch_size: u64, rank: u32, world: u32) -> Vec<SampleId> {
    if world == 1 {
        return order;
    }
    // Positions in u64, so that a `usize` of 32 bits cannot overflow on `rank * batch_size`
    // or on the step past the end; only positions below `len` are turned back into `usize`.
    let len = order.len() as u64;
    let global_batch = batch_size.saturating_mul(u64::from(world));
    let mut kept = 0;
    let mut start = u64::from(rank).saturating_mul(batch_size);
    while start < len {
        let end = start.saturating_add(batch_size).min(len);
        // The destination never passes the source, so the copy is a plain forward compaction.
        order.copy_within(start as usize..end as usize, kept);
        kept += (end - start) as usize;
        start = start.saturating_add(global_batch);
    }
    order.truncate(kept);
    order.shrink_to_fit();
    order
}

/// The `pad` repeated samples of an epoch with global order `order`: the first `min(pad, w)`
/// samples of a seeded permutation of its last full global batch (`w = global_batch` samples;
/// the whole order, `w = N`, when it has no full global batch), cycled to length `pad`.
///
/// Drawn from the end of the epoch so that the blocks they come from are the ones the last
/// batches read anyway; a partial Fisher-Yates over a copy of that batch costs O(w).
fn pad_samples(
    order: &[SampleId],
    global_batch: u64,
    pad: u64,
    seed: u64,
    epoch: u64,
) -> Vec<SampleId> {
    let len = order.len() as u64;
    let end = if len >= global_batch {
        len - len % global_batch
    } else {
        len
    };
    let mut window = order[end.saturating_sub(global_batch) as usize..end as usize].to_vec();
    let distinct = pad.min(window.len() as u64) as usize;
    let mut rng = PlanRng::new(seed, epoch, Purpose::Pad);
    for index in 0..distinct {
        let pick = index + rng.below((window.len() - index) as u64) as usize;
        window.swap(index, pick);
    }
    (0..pad as usize)
        .map(|index| window[index % distinct])
        .collect()
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout, Shard};

    use super::*;

    fn layout(samples: u64) -> Layout {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"f"), &[samples]);
        builder.build().unwrap()
    }

    /// A custom layout with a gap between its blocks: samples 4 and 5 belong to no block.
    struct Gapped([kiln_ml_core::Block; 2]);

    impl BlockLayout for Gapped {
        fn blocks(&self) -> &[kiln_ml_core::Block] {
            &self.0
        }
        fn fingerprint(&self) -> Fingerprint {
            Fingerprint::of_bytes(b"gapped")
        }
    }

    #[test]
    fn layouts_that_do_not_tile_their_ids_are_refused_before_planning() {
        let block = |first_sample, rows| kiln_ml_core::Block {
            file: 0,
            index_in_file: 0,
            first_sample,
            rows,
        };
        let gapped = Gapped([block(0, 4), block(6, 2)]);
        let error = Sharding::new(2, RemainderPolicy::Drop)
            .check(&gapped, &request(0, 1))
            .unwrap_err();
        assert!(
            matches!(error, Error::InvalidLayout { block: 1, .. }),
            "{error}"
        );
        assert_eq!(
            Sharding::new(2, RemainderPolicy::Drop).check(&layout(8), &request(0, 2)),
            Ok(2)
        );
    }

    fn request(rank: u32, world: u32) -> PlanRequest {
        PlanRequest::new(5, 2).with_shard(Shard::new(rank, world).unwrap())
    }

    #[test]
    fn ranks_take_interleaved_runs_of_each_global_batch() {
        let layout = layout(12);
        let sharding = Sharding::new(2, RemainderPolicy::Drop);
        let global: Vec<u64> = (0..12).collect();
        let rank1 = sharding
            .plan(global.clone(), &layout, &request(1, 2))
            .unwrap();
        assert_eq!(rank1.order(), &[2, 3, 6, 7, 10, 11]);
        let rank0 = sharding.plan(global, &layout, &request(0, 3)).unwrap();
        assert_eq!(rank0.order(), &[0, 1, 6, 7]);
    }

    #[test]
    fn batches_beyond_32_bits_keep_the_whole_order_on_rank_0_and_nothing_on_the_others() {
        // `rank * batch_size` and the step past the end exceed `u32::MAX`: a 32-bit `usize`
        // wrapped them and kept samples on the wrong rank.
        let order: Vec<u64> = (0..10).collect();
        let batch = u64::from(u32::MAX) + 2;
        assert_eq!(take_rank(order.clone(), batch, 0, 4), order);
        assert!(take_rank(order.clone(), batch, 1, 4).is_empty());
        assert!(take_rank(order, batch, 3, 4).is_empty());
    }

    #[test]
    fn drop_truncates_pad_repeats_uneven_keeps_the_tail() {
        let layout = layout(10);
        let global: Vec<u64> = (0..10).collect();
        let drop = Sharding::new(2, RemainderPolicy::Drop);
        let lens: Vec<usize> = (0..2)
            .map(|rank| {
                drop.plan(global.clone(), &layout, &request(rank, 2))
                    .unwrap()
                    .len()
            })
            .collect();
        assert_eq!(lens, [4, 4]);

        let pad = Sharding::new(2, RemainderPolicy::Pad);
        let plans: Vec<Plan> = (0..2)
            .map(|rank| {
                pad.plan(global.clone(), &layout, &request(rank, 2))
                    .unwrap()
            })
            .collect();
        assert_eq!(plans[0].len(), 6);
        assert_eq!(plans[1].len(), 6);
        let global: Vec<u64> = (0..10).collect();
        assert_eq!(
            &plans[1].order()[4..],
            &pad_samples(&global, 4, 2, 5, 2)[..]
        );

        let uneven = Sharding::new(2, RemainderPolicy::Uneven);
        let lens: Vec<usize> = (0..2)
            .map(|rank| {
                uneven
                    .plan(global.clone(), &layout, &request(rank, 2))
                    .unwrap()
                    .len()
            })
            .collect();
        assert_eq!(lens, [6, 4]);
    }

    #[test]
    fn pad_repeats_distinct_samples_of_the_last_full_global_batch() {
        // 1,000 samples in global batches of 64: the last full one is positions 896..960.
        let order: Vec<u64> = (0..1000).rev().collect();
        let pads = pad_samples(&order, 64, 24, 1, 0);
        let mut distinct = pads.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 24);
        assert!(
            pads.iter().all(|id| order[896..960].contains(id)),
            "{pads:?}"
        );
        assert_ne!(pads, pad_samples(&order, 64, 24, 1, 1));
        assert_eq!(pads, pad_samples(&order, 64, 24, 1, 0));
        // Fewer samples than a global batch: drawn from all of them, cycled.
        let cycled = pad_samples(&[7, 8, 9], 10, 7, 1, 0);
        assert_eq!(&cycled[..3], &cycled[3..6]);
        let mut first = cycled[..3].to_vec();
        first.sort_unstable();
        assert_eq!(first, [7, 8, 9]);
    }

    #[test]
    fn impossible_configurations_fail_clearly() {
        let drop = Sharding::new(4, RemainderPolicy::Drop);
        assert_eq!(
            drop.batches_per_rank(3, 4).unwrap_err(),
            Error::TooFewSamples {
                samples: 3,
                world: 4
            }
        );
        // Enough samples for the ranks but not for one global batch: only Drop fails.
        assert!(matches!(
            drop.batches_per_rank(7, 2),
            Err(Error::TooFewSamples { .. })
        ));
        assert_eq!(
            Sharding::new(4, RemainderPolicy::Pad)
                .batches_per_rank(7, 2)
                .unwrap(),
            1
        );
        assert_eq!(
            Sharding::new(0, RemainderPolicy::Pad)
                .batches_per_rank(7, 1)
                .unwrap_err(),
            Error::ZeroBatchSize
        );
        assert_eq!(
            Sharding::default().batches_per_rank(0, 1).unwrap_err(),
            Error::EmptyLayout
        );
        let overflow = Sharding::new(u64::MAX, RemainderPolicy::Pad).batches_per_rank(7, 2);
        assert!(
            matches!(overflow, Err(Error::InvalidConfig(message)) if message.contains("overflows"))
        );
        // Padding 10 samples to a batch of 2^60 would take 8 EiB: refused, not an abort.
        let huge = Sharding::new(1 << 60, RemainderPolicy::Pad)
            .plan((0..10).collect(), &layout(10), &request(0, 1))
            .unwrap_err()
            .to_string();
        assert!(huge.contains("more than memory holds"), "{huge}");
    }

    #[test]
    fn a_global_order_that_is_not_a_permutation_is_refused() {
        let sharding = Sharding::new(2, RemainderPolicy::Drop);
        for (order, expected) in [
            (vec![0, 1, 2], "has 3 samples but the layout has 4"),
            (vec![0, 1, 1, 3], "sample 1 twice (positions 1 and 2)"),
            (vec![0, 1, 2, 9], "sample 9 at position 3"),
        ] {
            let error = sharding
                .plan(order, &layout(4), &request(0, 1))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn serde_uses_snake_case_and_defaults() {
        let sharding: Sharding = serde_json::from_str(r#"{"remainder":"uneven"}"#).unwrap();
        assert_eq!(sharding, Sharding::new(1, RemainderPolicy::Uneven));
        assert!(serde_json::from_str::<Sharding>(r#"{"batch":3}"#).is_err());
    }
}
