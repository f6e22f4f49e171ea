//! The budget and the cut: an order into batches by the sum (or padded size) of their samples.

use kiln_ml_core::{Error, Result, SampleId};

use crate::rng::{PlanRng, Purpose};
use crate::windows::balanced_windows;

/// How to cut an order into batches by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SizeBudget {
    /// Elements a batch may hold: the sum of its sizes, or `rows × longest` when `padded`. A
    /// single sample above it gets a batch of its own; a sample of size 0 counts as 1, so that
    /// a batch never grows without bound.
    pub budget: u64,
    /// Count a batch as padded to its longest sample (pad-to-longest collation) rather than as
    /// the sum of its sizes (packed collation).
    pub padded: bool,
    /// Consecutive samples of the order grouped by length before cutting (the length-aware
    /// window; the order is cut into `⌈len / window⌉` windows of balanced sizes, the block
    /// shuffle's own windows for the same value); 0 or 1 cuts the order as it is.
    pub window: usize,
}

/// An order cut into size-budget batches: the samples in their new order, and where each batch
/// ends (exclusive positions in `order`, increasing, the last one `order.len()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetBatches {
    /// The samples, batch after batch.
    pub order: Vec<SampleId>,
    /// One past each batch's last position.
    pub ends: Vec<u64>,
}

impl BudgetBatches {
    /// The positions of batch `batch` in [`order`](Self::order).
    pub fn range(&self, batch: usize) -> std::ops::Range<usize> {
        let start = batch
            .checked_sub(1)
            .map_or(0, |before| self.ends[before] as usize);
        start..self.ends[batch] as usize
    }
}

impl SizeBudget {
    /// Cuts `order` into batches with `sizes[sample]` each sample's size; the batches of each
    /// window are shuffled with the plan stream of `seed` and `epoch`.
    ///
    /// ```
    /// use kiln_ml_sampler::SizeBudget;
    ///
    /// let sizes = [9, 1, 9, 1, 1, 9, 9, 1];
    /// let budget = SizeBudget { budget: 18, padded: true, window: 8 };
    /// let batches = budget.batches(&[0, 1, 2, 3, 4, 5, 6, 7], &sizes, 7, 0).unwrap();
    /// // Grouped by length: the four 1s together, the 9s two by two (2 × 9 = 18).
    /// assert_eq!(batches.ends.len(), 3);
    /// for batch in 0..3 {
    ///     let range = batches.range(batch);
    ///     let lengths: Vec<u64> = batches.order[range].iter().map(|&s| sizes[s as usize]).collect();
    ///     assert!(lengths == [1, 1, 1, 1] || lengths == [9, 9], "{lengths:?}");
    /// }
    /// ```
    pub fn batches(
        &self,
        order: &[SampleId],
        sizes: &[u64],
        seed: u64,
        epoch: u64,
    ) -> Result<BudgetBatches> {
        self.validate()?;
        let mut sized = order
            .iter()
            .enumerate()
            .map(|(position, &sample)| Ok((sample, sample_size(sizes, position, sample)?)))
            .collect::<Result<Vec<_>>>()?;
        // Without grouping, the whole order is one window, cut as it is. With it, the windows
        // are the block shuffle's own (balanced), so a window's batches read its blocks only.
        let grouped = self.window > 1;
        let mut rng = PlanRng::new(seed, epoch, Purpose::BudgetBatches);
        let mut batches = BudgetBatches {
            order: Vec::with_capacity(order.len()),
            ends: Vec::new(),
        };
        for window in balanced_windows(sized.len(), self.window) {
            let samples = &mut sized[window];
            if grouped {
                // Stable: equal sizes keep the order's (shuffled) order.
                samples.sort_by_key(|&(_, size)| size);
            }
            let mut cuts = self.cut(samples);
            if grouped {
                rng.shuffle(&mut cuts);
            }
            for range in cuts {
                batches
                    .order
                    .extend(samples[range].iter().map(|&(sample, _)| sample));
                batches.ends.push(batches.order.len() as u64);
            }
        }
        Ok(batches)
    }

    /// Checks the budget: at least 1 element.
    pub fn validate(&self) -> Result<()> {
        if self.budget == 0 {
            return Err(Error::InvalidConfig(
                "a size budget must be at least 1 element".to_owned(),
            ));
        }
        Ok(())
    }

    /// `samples` cut greedily into consecutive batches within the budget.
    fn cut(&self, samples: &[(SampleId, u64)]) -> Vec<std::ops::Range<usize>> {
        let mut cuts = Vec::new();
        let (mut start, mut sum, mut longest) = (0, 0u64, 0u64);
        for (index, &(_, size)) in samples.iter().enumerate() {
            // An empty sample still takes a row.
            let size = size.max(1);
            let rows = (index - start) as u64 + 1;
            let cost = if self.padded {
                rows.saturating_mul(longest.max(size))
            } else {
                sum.saturating_add(size)
            };
            if index > start && cost > self.budget {
                cuts.push(start..index);
                (start, sum, longest) = (index, 0, 0);
            }
            // Saturating like the cost: a budget of `u64::MAX` means no limit, not an overflow.
            sum = sum.saturating_add(size);
            longest = longest.max(size);
        }
        if start < samples.len() {
            cuts.push(start..samples.len());
        }
        cuts
    }
}

/// `sizes[sample]`, or an error naming the plan position and sample outside `sizes`.
pub(crate) fn sample_size(sizes: &[u64], position: usize, sample: SampleId) -> Result<u64> {
    sizes.get(sample as usize).copied().ok_or_else(|| {
        Error::InvalidConfig(format!(
            "position {position} names sample {sample}, but sizes are given for {} samples",
            sizes.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::quality::SizeFigures;

    /// Sizes spread over 1..1000, in a fixed pseudo-random pattern.
    fn sizes(count: usize) -> Vec<u64> {
        (0..count as u64)
            .map(|i| 1 + (i * 7919 + 13) % 997)
            .collect()
    }

    #[test]
    fn grouping_by_length_cuts_the_padding() {
        let sizes = sizes(4096);
        let order: Vec<SampleId> = (0..4096).collect();
        let budget = |window| SizeBudget {
            budget: 16_000,
            padded: true,
            window,
        };
        let plain = budget(1).batches(&order, &sizes, 1, 0).unwrap();
        let grouped = budget(1024).batches(&order, &sizes, 1, 0).unwrap();
        let waste = |batches: &BudgetBatches| {
            SizeFigures::of_ends(&batches.order, &sizes, &batches.ends)
                .unwrap()
                .padding_waste
        };
        assert!(waste(&plain) > 0.5, "{}", waste(&plain));
        assert!(waste(&grouped) < 0.05, "{}", waste(&grouped));
        // Same seed and epoch, same batches; another epoch, another batch order.
        assert_eq!(grouped, budget(1024).batches(&order, &sizes, 1, 0).unwrap());
        assert_ne!(grouped, budget(1024).batches(&order, &sizes, 1, 1).unwrap());
    }

    #[test]
    fn a_zero_budget_and_unknown_samples_are_refused() {
        let budget = SizeBudget {
            budget: 0,
            padded: false,
            window: 0,
        };
        assert!(budget.batches(&[0], &[1], 0, 0).is_err());
        let budget = SizeBudget {
            budget: 5,
            ..budget
        };
        let error = budget.batches(&[0, 4], &[1, 2], 0, 0).unwrap_err();
        assert!(error.to_string().contains("sample 4"), "{error}");
    }

    #[test]
    fn a_budget_of_u64_max_is_no_limit_for_any_sizes() {
        for padded in [false, true] {
            let budget = SizeBudget {
                budget: u64::MAX,
                padded,
                window: 0,
            };
            let ends = budget
                .batches(&[0, 1, 2], &[u64::MAX, 1 << 63, 1 << 63], 0, 0)
                .unwrap();
            assert_eq!(ends.ends.last(), Some(&3), "padded {padded}");
        }
    }

    proptest! {
        /// Every sample once; every batch within the budget unless it is one sample above it;
        /// ends increasing to the order's length.
        #[test]
        fn batches_cover_the_order_within_the_budget(
            raw in proptest::collection::vec(0u64..50, 0..200),
            budget in 1u64..120,
            padded in any::<bool>(),
            window in 0usize..40,
        ) {
            let order: Vec<SampleId> = (0..raw.len() as u64).rev().collect();
            let config = SizeBudget { budget, padded, window };
            let batches = config.batches(&order, &raw, 3, 2).unwrap();
            let mut seen = batches.order.clone();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..raw.len() as u64).collect::<Vec<_>>());
            prop_assert_eq!(batches.ends.last().copied().unwrap_or(0), raw.len() as u64);
            for batch in 0..batches.ends.len() {
                let range = batches.range(batch);
                prop_assert!(!range.is_empty());
                // An empty sample costs 1 (so a run of them still closes batches).
                let members: Vec<u64> = batches.order[range].iter().map(|&s| raw[s as usize].max(1)).collect();
                let cost = if padded {
                    members.len() as u64 * members.iter().copied().max().unwrap_or(0)
                } else {
                    members.iter().sum()
                };
                prop_assert!(cost <= budget || members.len() == 1, "{:?} costs {}", members, cost);
            }
        }
    }
}
