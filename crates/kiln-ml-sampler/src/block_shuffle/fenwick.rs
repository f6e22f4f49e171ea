//! A Fenwick (binary indexed) tree of lane weights: a weighted draw and an update in
//! O(log lanes) each, however lopsided the weights.

use crate::rng::PlanRng;

/// Prefix sums of integer weights, one per lane, kept under point updates.
#[derive(Debug, Clone)]
pub(crate) struct FenwickTree {
    /// `sums[i - 1]` holds the weights of lanes `i - lowbit(i)..i` (1-based `i`).
    sums: Vec<u64>,
}

impl FenwickTree {
    /// A tree over `weights`, built in one linear pass.
    pub(crate) fn new(weights: &[u64]) -> Self {
        let mut sums = weights.to_vec();
        for index in 1..=sums.len() {
            let parent = index + lowbit(index);
            if parent <= sums.len() {
                sums[parent - 1] += sums[index - 1];
            }
        }
        Self { sums }
    }

    /// Adds `delta` (wrapping, so a subtraction is a wrapped add) to `lane`'s weight.
    pub(crate) fn add(&mut self, lane: usize, delta: u64) {
        let mut index = lane + 1;
        while index <= self.sums.len() {
            self.sums[index - 1] = self.sums[index - 1].wrapping_add(delta);
            index += lowbit(index);
        }
    }

    /// Draws a lane with probability `weight / total`; `total`, the sum of all weights, must be
    /// positive.
    pub(crate) fn pick(&self, total: u64, rng: &mut PlanRng) -> usize {
        self.lane_holding(rng.below(total))
    }

    /// The lane whose weight covers unit `target` of the weights laid end to end: the first
    /// lane whose prefix sum exceeds `target`. A walk down the implicit tree, one level per bit.
    fn lane_holding(&self, mut target: u64) -> usize {
        let mut index = 0;
        let mut step = self.sums.len().checked_ilog2().map_or(0, |log| 1 << log);
        while step > 0 {
            let next = index + step;
            if next <= self.sums.len() && self.sums[next - 1] <= target {
                target -= self.sums[next - 1];
                index = next;
            }
            step >>= 1;
        }
        index
    }
}

/// The lowest set bit of `index`: the span of lanes its node sums.
fn lowbit(index: usize) -> usize {
    index & index.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_of_weight_maps_to_its_lane() {
        let mut weights = vec![3, 0, 1, 5, 0, 0, 2, 4, 1];
        let mut tree = FenwickTree::new(&weights);
        let check = |tree: &FenwickTree, weights: &[u64]| {
            let mut unit = 0;
            for (lane, &weight) in weights.iter().enumerate() {
                for _ in 0..weight {
                    assert_eq!(tree.lane_holding(unit), lane, "unit {unit} of {weights:?}");
                    unit += 1;
                }
            }
        };
        check(&tree, &weights);
        tree.add(3, 4u64.wrapping_neg());
        weights[3] -= 4;
        tree.add(5, 6);
        weights[5] += 6;
        tree.add(0, 3u64.wrapping_neg());
        weights[0] = 0;
        check(&tree, &weights);
    }
}
