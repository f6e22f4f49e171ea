//! How much of the data a loader must hold to execute a plan.

use kiln_ml_core::{BlockLayout, Plan};

/// What a loader that reads each block at its first use and frees it after its last use holds
/// while executing a plan.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanResidency {
    /// The most blocks held at once.
    pub max_blocks: usize,
    /// The most rows (samples, read or not yet emitted) held at once.
    pub max_rows: u64,
    /// Rows held, averaged over the plan's positions.
    pub mean_rows: f64,
}

/// Measures how many blocks and rows a block-at-a-time loader holds while executing `plan`.
///
/// A block counts as held from its first use to its last use, inclusive (the
/// [schedule](kiln_ml_core::Plan::schedule)); a loader that frees single samples once they are
/// emitted holds less. Blocks not in `layout` count zero rows. kiln-ml-data's `Loader::residency`
/// gives the same figure for its own loader, with the prefetch window, read-ahead and assembled
/// batches counted in.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::{SequentialSampler, quality};
///
/// let mut builder = Layout::builder();
/// builder.add_file(Fingerprint::of_bytes(b"a"), &[10, 10, 10]);
/// let layout = builder.build()?;
/// let plan = SequentialSampler::default().plan(&layout, &PlanRequest::new(0, 0))?;
/// let held = quality::residency(&plan, &layout);
/// assert_eq!((held.max_blocks, held.max_rows), (1, 10));
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub fn residency(plan: &Plan, layout: &dyn BlockLayout) -> PlanResidency {
    let blocks = layout.blocks();
    // +rows at first use, −rows just after last use; at equal positions, releases first.
    let mut events: Vec<(u64, i64, u64)> = Vec::with_capacity(2 * plan.schedule().len());
    let mut weighted_rows = 0u128;
    for used in plan.schedule() {
        let rows = blocks
            .get(used.block as usize)
            .map_or(0, |block| block.rows);
        events.push((used.first_use, 1, rows));
        events.push((used.last_use + 1, -1, rows));
        weighted_rows += u128::from(rows) * u128::from(used.last_use + 1 - used.first_use);
    }
    events.sort_unstable();
    let (mut held_blocks, mut held_rows) = (0i64, 0u64);
    let (mut max_blocks, mut max_rows) = (0i64, 0u64);
    for (_, change, rows) in events {
        held_blocks += change;
        if change > 0 {
            held_rows += rows;
        } else {
            held_rows -= rows;
        }
        max_blocks = max_blocks.max(held_blocks);
        max_rows = max_rows.max(held_rows);
    }
    PlanResidency {
        max_blocks: max_blocks as usize,
        max_rows,
        mean_rows: if plan.is_empty() {
            0.0
        } else {
            weighted_rows as f64 / plan.len() as f64
        },
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout, Shard};

    use super::*;

    #[test]
    fn overlapping_uses_are_counted_together() {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"a"), &[2, 2, 3]);
        let layout = builder.build().unwrap();
        // Blocks 0 and 1 interleave; block 2 follows alone.
        let plan = Plan::new(0, Shard::SINGLE, 1, vec![0, 2, 1, 3, 4, 5, 6], &layout).unwrap();
        let held = residency(&plan, &layout);
        assert_eq!(held.max_blocks, 2);
        assert_eq!(held.max_rows, 4);
        // Rows held per position: 2, 4, 4, 2, 3, 3, 3 → 21 / 7.
        assert!((held.mean_rows - 3.0).abs() < 1e-12);
    }
}
