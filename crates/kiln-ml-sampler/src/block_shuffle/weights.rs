//! Weighted choice among the open lanes: by rejection against an upper bound while the weights
//! are even, through a Fenwick tree once they turn lopsided.

use super::fenwick::FenwickTree;
use crate::rng::PlanRng;

/// Expected tries per draw above which rejection gives way to the tree. A try costs two random
/// numbers and an unpredictable branch; a tree draw and update over K lanes walk
/// log2 K levels each. Not tuned: the `plan_lopsided` bench (plan_build) shows the tree 10-17x
/// faster at about 48 tries, and even layouts (one or two tries) never reach this.
const MAX_EXPECTED_TRIES: u64 = 4;

/// Rows left to draw per lane (in the open lanes and, for a shared queue, in the blocks still
/// queued) below which draws stay with rejection however lopsided: switching pays only over
/// many draws, and what is left then costs at most this times lanes² tries in expectation
/// (about 590,000 for 192 lanes), once an interleave. It keeps the ragged end of an epoch's
/// stratified lanes, where a few rows remain scattered over many lanes, with the draws it
/// always had.
const MIN_ROWS_PER_LANE: u64 = 16;

/// Whether draws among `lanes` lanes can ever leave rejection: the expected tries,
/// `active × max / total`, never exceed the number of lanes with weight.
pub(crate) fn may_leave_rejection(lanes: usize) -> bool {
    lanes as u64 > MAX_EXPECTED_TRIES
}

/// Integer weights, one per lane, and exact draws of a lane with probability
/// `weight / total`.
///
/// A draw picks a uniformly random lane with weight left and accepts it with probability
/// `weight / bound`, where `bound` is at least every weight; otherwise it tries again. Lanes of
/// the block shuffle mostly drain at nearly the same pace, so nearly every try is accepted and a
/// draw costs two random numbers, where a Fenwick tree walk costs a chain of dependent loads per
/// level. The bound is tightened to the current largest weight whenever tries start failing,
/// which keeps the expected number of tries at `lanes × max / total` plus a constant.
///
/// When that expectation exceeds [`MAX_EXPECTED_TRIES`] at a tightening (one block holding a
/// large share of the data, say), the draws switch to a [`FenwickTree`] for the rest of the
/// interleave: O(log lanes) per draw however lopsided the weights. The switch depends on the
/// weights and on the failed tries, both fixed by the seed and epoch, so plans stay
/// deterministic; the draws after it differ from rejection's.
#[derive(Debug, Clone)]
pub(crate) struct LaneWeights {
    weights: Vec<u64>,
    /// Lanes with weight left, in no particular order; `slot[lane]` is a lane's place in it.
    active: Vec<u32>,
    slot: Vec<u32>,
    total: u64,
    /// Rows that refills will still add (the shared queue's unopened blocks).
    queued: u64,
    draw: Draw,
}

/// How [`LaneWeights::pick`] draws.
#[derive(Debug, Clone)]
enum Draw {
    /// Uniform tries accepted with probability `weight / bound`; `failed_tries` counts the
    /// rejections since the bound was last tightened.
    Rejection { bound: u64, failed_tries: usize },
    /// The weights turned lopsided: a walk down their Fenwick tree.
    Tree(FenwickTree),
}

impl LaneWeights {
    /// Weights for lanes `0..weights.len()`, never refilled.
    pub(crate) fn new(weights: Vec<u64>) -> Self {
        Self::with_queued(weights, 0)
    }

    /// Weights for lanes `0..weights.len()`, which [`refill`](Self::refill)s will add `queued`
    /// rows to in all.
    pub(crate) fn with_queued(weights: Vec<u64>, queued: u64) -> Self {
        let mut active = Vec::with_capacity(weights.len());
        let mut slot = vec![u32::MAX; weights.len()];
        for (lane, &weight) in weights.iter().enumerate() {
            if weight > 0 {
                slot[lane] = active.len() as u32;
                active.push(lane as u32);
            }
        }
        Self {
            draw: Draw::Rejection {
                bound: weights.iter().copied().max().unwrap_or(0),
                failed_tries: 0,
            },
            total: weights.iter().sum(),
            queued,
            weights,
            active,
            slot,
        }
    }

    /// The sum of all weights.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Draws a lane with probability `weight / total`; `total` must be positive.
    #[inline]
    pub(crate) fn pick(&mut self, rng: &mut PlanRng) -> usize {
        debug_assert!(self.total > 0);
        if let [only] = self.active[..] {
            // One lane left (always, for a pure block shuffle): nothing to draw.
            return only as usize;
        }
        loop {
            let (bound, failed_tries) = match &mut self.draw {
                Draw::Tree(tree) => return tree.pick(self.total, rng),
                Draw::Rejection {
                    bound,
                    failed_tries,
                } => (bound, failed_tries),
            };
            let lane = self.active[rng.below(self.active.len() as u64) as usize] as usize;
            if rng.below(*bound) < self.weights[lane] {
                return lane;
            }
            *failed_tries += 1;
            if *failed_tries > self.active.len() {
                // Tries fail often: the bound has drifted above the weights; tighten it, or
                // leave rejection if even the tight bound would fail most tries.
                let max = self
                    .active
                    .iter()
                    .map(|&l| self.weights[l as usize])
                    .max()
                    .unwrap_or(1);
                *bound = max;
                *failed_tries = 0;
                let lanes = self.active.len() as u64;
                let expected_tries = u128::from(lanes) * u128::from(max);
                let rows_left = u128::from(self.total) + u128::from(self.queued);
                if expected_tries > u128::from(MAX_EXPECTED_TRIES) * u128::from(self.total)
                    && rows_left >= u128::from(MIN_ROWS_PER_LANE * lanes)
                {
                    self.draw = Draw::Tree(FenwickTree::new(&self.weights));
                }
            }
        }
    }

    /// Whether draws have switched to the Fenwick tree.
    #[cfg(test)]
    fn uses_tree(&self) -> bool {
        matches!(self.draw, Draw::Tree(_))
    }

    /// Takes one unit from `lane`'s weight, which must be positive.
    pub(crate) fn take_one(&mut self, lane: usize) {
        self.weights[lane] -= 1;
        self.total -= 1;
        if let Draw::Tree(tree) = &mut self.draw {
            tree.add(lane, 1u64.wrapping_neg());
        }
        if self.weights[lane] == 0 {
            // Swap-remove the lane from the active list.
            let at = self.slot[lane] as usize;
            let moved = *self.active.last().unwrap_or(&0);
            self.active.swap_remove(at);
            if at < self.active.len() {
                self.slot[moved as usize] = at as u32;
            }
            self.slot[lane] = u32::MAX;
        }
    }

    /// Gives an empty `lane` a new weight (a lane that opened its next block).
    pub(crate) fn refill(&mut self, lane: usize, weight: u64) {
        debug_assert_eq!(self.weights[lane], 0);
        if weight == 0 {
            return;
        }
        self.weights[lane] = weight;
        self.total += weight;
        self.queued = self.queued.saturating_sub(weight);
        match &mut self.draw {
            Draw::Rejection { bound, .. } => *bound = (*bound).max(weight),
            Draw::Tree(tree) => tree.add(lane, weight),
        }
        self.slot[lane] = self.active.len() as u32;
        self.active.push(lane as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Purpose;

    #[test]
    fn draws_follow_the_weights() {
        let mut weights = LaneWeights::new(vec![1, 0, 3, 6]);
        let mut rng = PlanRng::new(1, 0, Purpose::Interleave);
        let mut counts = [0u32; 4];
        for _ in 0..100_000 {
            counts[weights.pick(&mut rng)] += 1;
        }
        // Binomial sds are at most ~160; allow 6 sd.
        let expected = [10_000i64, 0, 30_000, 60_000];
        for (count, expected) in counts.iter().zip(expected) {
            assert!((i64::from(*count) - expected).abs() < 1_000, "{counts:?}");
        }
    }

    #[test]
    fn lopsided_weights_switch_to_the_tree_and_draws_follow_the_weights() {
        // Five lanes, one with 96% of the weight: rejection would expect 4.8 tries per draw.
        let mut weights = LaneWeights::new(vec![1, 0, 1, 1, 1, 96]);
        let mut rng = PlanRng::new(4, 0, Purpose::Interleave);
        let mut counts = [0u32; 6];
        for _ in 0..100_000 {
            counts[weights.pick(&mut rng)] += 1;
        }
        assert!(weights.uses_tree());
        // Binomial sds are at most ~62; allow 6 sd.
        let expected = [1_000i64, 0, 1_000, 1_000, 1_000, 96_000];
        for (count, expected) in counts.iter().zip(expected) {
            assert!((i64::from(*count) - expected).abs() < 400, "{counts:?}");
        }
    }

    #[test]
    fn the_tree_follows_takes_and_refills_to_the_last_unit() {
        // Drained to empty, every lane must have been drawn exactly its weight: a tree out of
        // step with the weights would draw an empty lane and underflow.
        let mut weights = LaneWeights::new([vec![10_000], vec![10; 20]].concat());
        let mut rng = PlanRng::new(5, 0, Purpose::Interleave);
        let mut counts = vec![0u64; 21];
        let mut refilled = false;
        while weights.total() > 0 {
            let lane = weights.pick(&mut rng);
            counts[lane] += 1;
            weights.take_one(lane);
            if counts[lane] == 10 && lane > 0 && !refilled {
                assert!(weights.uses_tree());
                weights.refill(lane, 7);
                refilled = true;
            }
        }
        let refilled_lane = counts.iter().position(|&count| count == 17).unwrap();
        let mut expected = [vec![10_000], vec![10; 20]].concat();
        expected[refilled_lane] = 17;
        assert_eq!(counts, expected);
    }

    #[test]
    fn taking_and_refilling_keep_totals_and_membership() {
        let mut weights = LaneWeights::new(vec![2, 1]);
        let mut rng = PlanRng::new(2, 0, Purpose::Interleave);
        weights.take_one(1);
        assert_eq!(weights.total(), 2);
        // Only lane 0 is left: every draw must return it.
        assert!((0..100).all(|_| weights.pick(&mut rng) == 0));
        weights.take_one(0);
        weights.take_one(0);
        assert_eq!(weights.total(), 0);
        weights.refill(1, 5);
        assert_eq!(weights.total(), 5);
        assert!((0..100).all(|_| weights.pick(&mut rng) == 1));
    }

    #[test]
    fn the_bound_tightens_when_weights_shrink() {
        // One heavy lane drains to 1: draws must stay exact and finish quickly.
        let mut weights = LaneWeights::new(vec![1_000_000, 1]);
        let mut rng = PlanRng::new(3, 0, Purpose::Interleave);
        for _ in 0..999_999 {
            weights.take_one(0);
        }
        let mut counts = [0u32; 2];
        for _ in 0..10_000 {
            counts[weights.pick(&mut rng)] += 1;
        }
        assert!((i64::from(counts[0]) - 5_000).abs() < 400, "{counts:?}");
    }

    #[test]
    fn few_rows_left_stay_with_rejection_however_lopsided() {
        // Ten lanes, one with 60 of 69 rows: 8.7 expected tries, but under 16 rows a lane left.
        let lopsided = [vec![60], vec![1; 9]].concat();
        let mut weights = LaneWeights::new(lopsided.clone());
        let mut rng = PlanRng::new(6, 0, Purpose::Interleave);
        for _ in 0..30 {
            let lane = weights.pick(&mut rng);
            weights.take_one(lane);
        }
        assert!(!weights.uses_tree());
        // The same lanes with a shared queue's rows still to come do switch.
        let mut weights = LaneWeights::with_queued(lopsided, 1_000);
        for _ in 0..30 {
            let lane = weights.pick(&mut rng);
            weights.take_one(lane);
        }
        assert!(weights.uses_tree());
    }
}
