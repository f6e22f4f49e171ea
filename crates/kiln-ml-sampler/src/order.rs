//! The `GlobalOrder` seam: an epoch's order over all samples, before it is sharded over ranks.

use std::sync::Arc;

use kiln_ml_core::{BlockLayout, Fingerprint, Result, SampleId};

/// An epoch's global order: every sample of a layout exactly once, as a pure function of the
/// layout's blocks, the seed and the epoch.
///
/// The order never depends on the world size, so one run can be resumed on another number of
/// ranks. An order becomes a [`Sampler`](kiln_ml_core::Sampler) by wrapping it in
/// [`Sharded`](crate::Sharded), which checks the request, builds the order and cuts it into the
/// requested rank's plan: kiln's own samplers are `Sharded<SequentialOrder>`,
/// `Sharded<RandomOrder>` and `Sharded<BlockShuffleOrder>`. Only
/// [`global_order`](Self::global_order) is required.
///
/// ```
/// use kiln_ml_core::{BlockLayout, Fingerprint, Layout, PlanRequest, Result, SampleId, Sampler, Shard};
/// use kiln_ml_sampler::{GlobalOrder, RemainderPolicy, Sharded, Sharding};
///
/// /// Every sample in reverse layout order.
/// struct Reverse;
///
/// impl GlobalOrder for Reverse {
///     fn global_order(&self, layout: &dyn BlockLayout, _: u64, _: u64) -> Result<Vec<SampleId>> {
///         Ok((0..layout.num_samples()).rev().collect())
///     }
/// }
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"f"), &[4, 4]);
/// let layout = builder.build()?;
/// // Two ranks, batches of 2: rank 1 takes the second run of 2 of each global batch of 4.
/// let sampler = Sharded::wrap(Reverse, Sharding::new(2, RemainderPolicy::Drop));
/// let request = PlanRequest::new(0, 0).with_shard(Shard::new(1, 2)?);
/// assert_eq!(sampler.plan(&layout, &request)?.order(), &[5, 4, 1, 0]);
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub trait GlobalOrder: Send + Sync {
    /// The global order of epoch `epoch` of the run seeded `seed`: every sample of `layout`
    /// exactly once (none for an empty layout, which [`Sharded`](crate::Sharded) refuses with
    /// [`Error::EmptyLayout`](kiln_ml_core::Error::EmptyLayout) before asking for its order).
    fn global_order(
        &self,
        layout: &dyn BlockLayout,
        seed: u64,
        epoch: u64,
    ) -> Result<Vec<SampleId>>;

    /// A fingerprint of what selects this order besides the layout, the seed and the epoch:
    /// its kind and parameters. [`Sharded`](crate::Sharded) folds it into its
    /// [`Sampler::settings_fingerprint`](kiln_ml_core::Sampler::settings_fingerprint), so a resume
    /// under another order is refused. The default, `None`, leaves the order out of that check.
    fn settings_fingerprint(&self) -> Option<Fingerprint> {
        None
    }

    /// Whether [`global_order`](Self::global_order) returns a permutation of the layout's
    /// samples by construction, so the samplers need not check it. The default, `false`, has
    /// every order checked (one pass over it: [`Sharded`](crate::Sharded) and the size-budget
    /// sampler refuse an order that misses, repeats or invents a sample, naming it); kiln's
    /// own orders, permutations by construction and tested as such, skip that pass.
    fn is_permutation(&self) -> bool {
        false
    }
}

/// Forwards [`GlobalOrder`] through a pointer to an order: `&T`, `Box<T>`, `Arc<T>`.
macro_rules! forward_global_order {
    ($($pointer:ty),*) => {$(
        impl<T: GlobalOrder + ?Sized> GlobalOrder for $pointer {
            fn global_order(
                &self,
                layout: &dyn BlockLayout,
                seed: u64,
                epoch: u64,
            ) -> Result<Vec<SampleId>> {
                (**self).global_order(layout, seed, epoch)
            }

            fn settings_fingerprint(&self) -> Option<Fingerprint> {
                (**self).settings_fingerprint()
            }

            fn is_permutation(&self) -> bool {
                (**self).is_permutation()
            }
        }
    )*};
}

forward_global_order!(&T, Box<T>, Arc<T>);
