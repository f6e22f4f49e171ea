//! Weighted choice among the open lanes, by rejection against an upper bound.

use crate::rng::PlanRng;

/// Integer weights, one per lane, and exact draws of a lane with probability
/// `weight / total`.
///
/// A draw picks a uniformly random lane with weight left and accepts it with probability
/// `weight / bound`, where `bound` is at least every weight; otherwise it tries again. Lanes of
/// the block shuffle drain at nearly the same pace, so nearly every try is accepted and a draw
/// costs two random numbers, where a Fenwick tree walk costs a chain of dependent loads per
/// level. The bound is tightened to the current largest weight whenever tries start failing,
/// which keeps the expected number of tries at most `lanes × max / total` plus a constant.
#[derive(Debug, Clone)]
pub(crate) struct LaneWeights {
    weights: Vec<u64>,
    /// Lanes with weight left, in no particular order; `slot[lane]` is a lane's place in it.
    active: Vec<u32>,
    slot: Vec<u32>,
    bound: u64,
    total: u64,
    failed_tries: usize,
}

impl LaneWeights {
    /// Weights for lanes `0..weights.len()`.
    pub(crate) fn new(weights: Vec<u64>) -> Self {
        let mut active = Vec::with_capacity(weights.len());
        let mut slot = vec![u32::MAX; weights.len()];
        for (lane, &weight) in weights.iter().enumerate() {
            if weight > 0 {
                slot[lane] = active.len() as u32;
                active.push(lane as u32);
            }
        }
        Self {
            bound: weights.iter().copied().max().unwrap_or(0),
            total: weights.iter().sum(),
            weights,
            active,
            slot,
            failed_tries: 0,
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
            let lane = self.active[rng.below(self.active.len() as u64) as usize] as usize;
            if rng.below(self.bound) < self.weights[lane] {
                return lane;
            }
            self.failed_tries += 1;
            if self.failed_tries > self.active.len() {
                // Tries fail often: the bound has drifted above the weights; tighten it.
                self.bound = self
                    .active
                    .iter()
                    .map(|&l| self.weights[l as usize])
                    .max()
                    .unwrap_or(1);
                self.failed_tries = 0;
            }
        }
    }

    /// Takes one unit from `lane`'s weight, which must be positive.
    pub(crate) fn take_one(&mut self, lane: usize) {
        self.weights[lane] -= 1;
        self.total -= 1;
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
        self.bound = self.bound.max(weight);
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
}
