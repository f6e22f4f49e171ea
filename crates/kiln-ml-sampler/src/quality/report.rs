//! Measuring an order: the whole epoch and its first and last windows, next to the ideal.

use kiln_ml_core::{BlockFinder, BlockLayout, Error, Result, SampleId};

use super::ideal::{IdealStats, ideal_stats};
use super::stats::{OrderStats, order_stats};
use super::{Grouping, QualityOptions};

/// One stretch of an order measured next to what a uniform permutation would score.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stretch {
    /// The measured values.
    pub measured: OrderStats,
    /// The ideal values for the same batch size and grouping.
    pub ideal: IdealStats,
}

impl Stretch {
    /// Measured over ideal distinct files per batch (1 is ideal; kiln's target is ≥ 0.8).
    pub fn distinct_ratio(&self) -> f64 {
        self.measured.distinct_files_per_batch / self.ideal.distinct_files_per_batch
    }

    /// P_same / P*, independent of the batch size (1 is ideal; kiln's target is ≤ 4).
    pub fn pair_rate_ratio(&self) -> f64 {
        self.measured.same_file_pair_rate / self.ideal.same_file_pair_rate
    }

    /// |ρ| in units of its null standard deviation 1 / √(n − 1).
    pub fn spearman_z(&self) -> f64 {
        self.measured.spearman.abs() / self.ideal.spearman_sd
    }
}

/// Shuffle quality of one order: the whole of it, and its first and last windows of
/// `window_batches × B` positions, where buffer shuffles are weakest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QualityReport {
    /// Batch size B the measures use.
    pub batch_size: usize,
    /// What counted as the same file.
    pub grouping: Grouping,
    /// Number of files (or blocks) with at least one sample in the layout.
    pub groups: usize,
    /// The whole order.
    pub whole: Stretch,
    /// The first window.
    pub first_window: Stretch,
    /// The last window.
    pub last_window: Stretch,
}

/// Measures the shuffle quality of `order` (sample ids of `layout`, for example a plan's
/// [`order`](kiln_ml_core::Plan::order)) against a uniform random permutation of the same data.
///
/// Costs O(n log n) time and about 30 bytes per position (file ids, and ranks for Spearman's ρ). Fails with
/// a clear error for options that cannot be measured, or for a sample id outside the layout.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::{RandomSampler, SequentialSampler, quality};
///
/// let mut builder = Layout::builder();
/// for file in 0..50u64 {
///     builder.add_file(Fingerprint::builder().u64(file).finish(), &[200]);
/// }
/// let layout = builder.build()?;
/// let options = quality::QualityOptions::new(32);
/// let request = PlanRequest::new(1, 0);
///
/// let sequential = SequentialSampler::default().plan(&layout, &request)?;
/// let report = quality::measure(&layout, sequential.order(), &options)?;
/// assert!(report.whole.measured.distinct_files_per_batch < 1.2);
/// assert!(report.whole.measured.spearman > 0.999);
///
/// let random = RandomSampler::default().plan(&layout, &request)?;
/// let report = quality::measure(&layout, random.order(), &options)?;
/// assert!(report.whole.distinct_ratio() > 0.97);
/// assert!(report.whole.pair_rate_ratio() < 1.3);
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub fn measure(
    layout: &dyn BlockLayout,
    order: &[SampleId],
    options: &QualityOptions,
) -> Result<QualityReport> {
    options.validate(order.len())?;
    let (group_of_block, sizes) = groups_of(layout, options.grouping);
    let samples = layout.num_samples();
    let mut groups = Vec::with_capacity(order.len());
    let finder = BlockFinder::new(layout.blocks());
    let mut cursor = finder.cursor();
    for (position, &sample) in order.iter().enumerate() {
        let (block, _) = cursor.place(sample).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "quality: order position {position} names sample {sample}, but the layout has {samples} samples"
            ))
        })?;
        groups.push(group_of_block[block as usize]);
    }
    let ideal = ideal_stats(
        &sizes,
        options.batch_size,
        options.monte_carlo_batches,
        options.seed,
    );
    let stretch = |range: std::ops::Range<usize>| Stretch {
        measured: order_stats(
            &groups[range.clone()],
            &order[range.clone()],
            sizes.len(),
            options.batch_size,
            &options.lags,
            ideal.same_file_pair_rate,
        ),
        ideal: ideal.for_positions(range.len()),
    };
    let window = (options.window_batches * options.batch_size).min(order.len());
    Ok(QualityReport {
        batch_size: options.batch_size,
        grouping: options.grouping,
        groups: sizes.iter().filter(|&&size| size > 0).count(),
        whole: stretch(0..order.len()),
        first_window: stretch(0..window),
        last_window: stretch(order.len() - window..order.len()),
    })
}

/// The group of every block and the number of samples in every group.
fn groups_of(layout: &dyn BlockLayout, grouping: Grouping) -> (Vec<u32>, Vec<u64>) {
    let blocks = layout.blocks();
    let group_of_block: Vec<u32> = match grouping {
        Grouping::File => blocks.iter().map(|block| block.file).collect(),
        Grouping::Block => (0..blocks.len() as u32).collect(),
    };
    let count = group_of_block
        .iter()
        .map(|&g| g as usize + 1)
        .max()
        .unwrap_or(0);
    let mut sizes = vec![0u64; count];
    for (block, &group) in blocks.iter().zip(&group_of_block) {
        sizes[group as usize] += block.rows;
    }
    (group_of_block, sizes)
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout};

    use super::*;

    fn layout() -> Layout {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"a"), &[4, 4]);
        builder.add_file(Fingerprint::of_bytes(b"b"), &[8]);
        builder.build().unwrap()
    }

    #[test]
    fn grouping_by_block_splits_files() {
        let layout = layout();
        let order: Vec<SampleId> = (0..16).collect();
        let options = QualityOptions::new(4).with_window_batches(1);
        let by_file = measure(&layout, &order, &options).unwrap();
        let by_block = measure(&layout, &order, &options.with_grouping(Grouping::Block)).unwrap();
        assert_eq!(by_file.groups, 2);
        assert_eq!(by_block.groups, 3);
        // Sequential batches of 4 hold one file and one block each.
        assert_eq!(by_file.whole.measured.distinct_files_per_batch, 1.0);
        assert_eq!(by_block.whole.measured.distinct_files_per_batch, 1.0);
        // Ideal pair rates: files 8 and 8 → 2·8·7 / (16·15); blocks 4, 4, 8 → (12+12+56) / 240.
        assert!((by_file.whole.ideal.same_file_pair_rate - 112.0 / 240.0).abs() < 1e-12);
        assert!((by_block.whole.ideal.same_file_pair_rate - 80.0 / 240.0).abs() < 1e-12);
        assert_eq!(by_file.first_window.measured.positions, 4);
        assert_eq!(by_file.last_window.measured.positions, 4);
        assert!((by_file.whole.pair_rate_ratio() - 240.0 / 112.0).abs() < 1e-12);
    }

    #[test]
    fn samples_outside_the_layout_are_named() {
        let error = measure(&layout(), &[0, 1, 99, 2], &QualityOptions::new(2)).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("position 2 names sample 99"), "{message}");
    }

    #[test]
    fn windows_are_clipped_to_short_orders() {
        let order: Vec<SampleId> = (0..16).rev().collect();
        let report = measure(&layout(), &order, &QualityOptions::new(4)).unwrap();
        assert_eq!(report.first_window.measured.positions, 16);
        assert!((report.whole.measured.spearman + 1.0).abs() < 1e-12);
        assert!((report.whole.spearman_z() - 15f64.sqrt()).abs() < 1e-9);
    }
}
