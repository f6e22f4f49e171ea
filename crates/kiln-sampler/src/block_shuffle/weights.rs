//! Weighted choice among a few open lanes: a Fenwick tree of integer weights.

/// Integer weights with O(log n) update and O(log n) "which item holds the `t`-th unit".
///
/// Drawing `t` uniformly in `0..total()` and calling [`find`](Self::find) picks item `i` with
/// probability `weight[i] / total`, exactly (no floating point).
#[derive(Debug, Clone)]
pub(crate) struct WeightTree {
    /// 1-based Fenwick array: `tree[i]` sums the weights of items `(i - lowbit(i), i]`.
    tree: Vec<u64>,
    total: u64,
    top_step: usize,
}

impl WeightTree {
    /// A tree holding `weights`, built in O(n).
    pub(crate) fn new(weights: &[u64]) -> Self {
        let len = weights.len();
        let mut tree = vec![0u64; len + 1];
        tree[1..].copy_from_slice(weights);
        for index in 1..=len {
            let parent = index + (index & index.wrapping_neg());
            if parent <= len {
                tree[parent] += tree[index];
            }
        }
        let top_step = if len == 0 {
            0
        } else {
            1 << (usize::BITS - 1 - len.leading_zeros())
        };
        Self {
            tree,
            total: weights.iter().sum(),
            top_step,
        }
    }

    /// The sum of all weights.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The item whose share of the cumulative weights holds unit `target` (`target < total`).
    pub(crate) fn find(&self, target: u64) -> usize {
        debug_assert!(target < self.total);
        let mut position = 0;
        let mut remaining = target;
        let mut step = self.top_step;
        while step > 0 {
            let next = position + step;
            if next < self.tree.len() && self.tree[next] <= remaining {
                position = next;
                remaining -= self.tree[next];
            }
            step >>= 1;
        }
        position
    }

    /// Adds `amount` to item `index`'s weight.
    pub(crate) fn add(&mut self, index: usize, amount: u64) {
        self.total += amount;
        let mut node = index + 1;
        while node < self.tree.len() {
            self.tree[node] += amount;
            node += node & node.wrapping_neg();
        }
    }

    /// Subtracts `amount` from item `index`'s weight, which must hold at least that much.
    pub(crate) fn subtract(&mut self, index: usize, amount: u64) {
        self.total -= amount;
        let mut node = index + 1;
        while node < self.tree.len() {
            self.tree[node] -= amount;
            node += node & node.wrapping_neg();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_maps_units_to_items_by_cumulative_weight() {
        let tree = WeightTree::new(&[2, 0, 3, 1]);
        assert_eq!(tree.total(), 6);
        let owners: Vec<usize> = (0..6).map(|unit| tree.find(unit)).collect();
        assert_eq!(owners, [0, 0, 2, 2, 2, 3]);
    }

    #[test]
    fn updates_move_units_between_items() {
        let weights = [5u64, 1, 0, 7, 2, 2, 9];
        let mut tree = WeightTree::new(&weights);
        tree.subtract(3, 7);
        tree.add(2, 4);
        tree.subtract(6, 8);
        let expected = [5u64, 1, 4, 0, 2, 2, 1];
        let mut owners = Vec::new();
        for (item, &weight) in expected.iter().enumerate() {
            owners.extend(std::iter::repeat_n(item, weight as usize));
        }
        assert_eq!(tree.total(), 15);
        let found: Vec<usize> = (0..15).map(|unit| tree.find(unit)).collect();
        assert_eq!(found, owners);
    }

    #[test]
    fn single_and_power_of_two_sizes() {
        let tree = WeightTree::new(&[3]);
        assert_eq!((0..3).map(|u| tree.find(u)).collect::<Vec<_>>(), [0, 0, 0]);
        let tree = WeightTree::new(&[1; 8]);
        assert_eq!(
            (0..8).map(|u| tree.find(u)).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
    }
}
