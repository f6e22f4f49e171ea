//! Figures of a plan's own batches: rows, distinct files and sizes per batch, for plans whose
//! batches hold varying numbers of samples (size-budget batches).

use kiln_ml_core::{BlockLayout, Error, Plan, Result};

use super::groups::groups_of_order;
use super::options::Grouping;
use super::sizes::SizeFigures;

/// The batches a plan actually delivers, measured one by one (where [`measure`](super::measure)
/// cuts the order every `batch_size` positions).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchFigures {
    /// Batches in the plan.
    pub batches: usize,
    /// Samples per batch: the mean.
    pub mean_rows: f64,
    /// Samples per batch: the largest.
    pub max_rows: usize,
    /// Distinct files (or blocks, by the report's grouping) per batch: the mean over batches.
    pub distinct_files_per_batch: f64,
    /// Padding waste and elements per batch, when the samples' sizes are given.
    pub sizes: Option<SizeFigures>,
}

impl BatchFigures {
    /// Measures `plan`'s batches over `layout`; with `sizes` (each sample's size, in sample-id
    /// order) also their padding waste and elements.
    pub fn of_plan(
        layout: &dyn BlockLayout,
        plan: &Plan,
        sizes: Option<&[u64]>,
        grouping: Grouping,
    ) -> Result<Self> {
        let (groups, _) = groups_of_order(layout, plan.order(), grouping)?;
        Self::of_groups(plan, &groups, sizes)
    }

    /// [`of_plan`](Self::of_plan) with each position's group (file or block) already known.
    pub(crate) fn of_groups(plan: &Plan, groups: &[u32], sizes: Option<&[u64]>) -> Result<Self> {
        let batches = plan.batch_count() as usize;
        if batches == 0 {
            return Err(Error::InvalidConfig(
                "quality: the plan has no batches to measure".to_owned(),
            ));
        }
        let (mut distinct_sum, mut max_rows) = (0usize, 0usize);
        let mut seen: Vec<u32> = Vec::new();
        for batch in 0..plan.batch_count() {
            let range = plan.batch_range(batch);
            let (start, end) = (range.start as usize, range.end as usize);
            max_rows = max_rows.max(end - start);
            seen.clear();
            seen.extend_from_slice(&groups[start..end]);
            seen.sort_unstable();
            seen.dedup();
            distinct_sum += seen.len();
        }
        let sizes = sizes
            .map(|sizes| {
                let ends: Vec<u64> = (0..plan.batch_count())
                    .map(|batch| plan.batch_range(batch).end)
                    .collect();
                SizeFigures::of_ends(plan.order(), sizes, &ends)
            })
            .transpose()?;
        Ok(Self {
            batches,
            mean_rows: plan.len() as f64 / batches as f64,
            max_rows,
            distinct_files_per_batch: distinct_sum as f64 / batches as f64,
            sizes,
        })
    }
}
