//! Measuring an order: the whole epoch and its first and last windows, next to the ideal.

use kiln_ml_core::{BlockLayout, Plan, Result, SampleId};

use super::batches::BatchFigures;
use super::groups::groups_of_order;
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
    /// The plan's own batches (rows, distinct files, padding waste and elements per batch),
    /// from [`measure_plan`]; `None` from [`measure`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<BatchFigures>,
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
    options.validate(order.len(), layout.num_samples())?;
    let (groups, sizes) = groups_of_order(layout, order, options.grouping)?;
    Ok(measure_groups(order, &groups, &sizes, options))
}

/// [`measure`] with each position's group and the samples of every group already known.
fn measure_groups(
    order: &[SampleId],
    groups: &[u32],
    sizes: &[u64],
    options: &QualityOptions,
) -> QualityReport {
    let ideal = ideal_stats(
        sizes,
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
    QualityReport {
        batch_size: options.batch_size,
        grouping: options.grouping,
        groups: sizes.iter().filter(|&&size| size > 0).count(),
        whole: stretch(0..order.len()),
        first_window: stretch(0..window),
        last_window: stretch(order.len() - window..order.len()),
        batches: None,
    }
}

/// [`measure`] of `plan`'s order, with the figures of the batches the plan actually delivers
/// ([`BatchFigures`]: for size-budget batches, which hold varying numbers of samples) and, with
/// `sizes` (each sample's size in sample-id order), their padding waste and elements.
///
/// ```
/// use kiln_ml_core::{Fingerprint, Layout, PlanRequest, Sampler};
/// use kiln_ml_sampler::{BlockShuffleConfig, quality};
///
/// let mut builder = Layout::builder();
/// for file in 0..20u64 {
///     builder.add_file(Fingerprint::builder().u64(file).finish(), &[100]);
/// }
/// let layout = builder.build()?;
/// let sizes: Vec<u64> = (0..2000).map(|sample| 1 + sample * 7919 % 500).collect();
/// let request = PlanRequest::new(1, 0);
/// let options = quality::QualityOptions::new(16);
/// let fixed = BlockShuffleConfig::default().with_batch_size(16).init()?.plan(&layout, &request)?;
/// let fixed = quality::measure_plan(&layout, &fixed, Some(&sizes), &options)?;
/// let grouped = BlockShuffleConfig::default()
///     .length_aware(8_000, true, sizes.clone())?
///     .plan(&layout, &request)?;
/// let grouped = quality::measure_plan(&layout, &grouped, Some(&sizes), &options)?;
/// let waste = |report: &quality::QualityReport| report.batches.as_ref().unwrap().sizes.unwrap().padding_waste;
/// assert!(waste(&grouped) < waste(&fixed) / 4.0);
/// # Ok::<(), kiln_ml_sampler::Error>(())
/// ```
pub fn measure_plan(
    layout: &dyn BlockLayout,
    plan: &Plan,
    sizes: Option<&[u64]>,
    options: &QualityOptions,
) -> Result<QualityReport> {
    let order = plan.order();
    options.validate(order.len(), layout.num_samples())?;
    // One pass over the order finds each position's file, for both sets of figures.
    let (groups, group_sizes) = groups_of_order(layout, order, options.grouping)?;
    let mut report = measure_groups(order, &groups, &group_sizes, options);
    report.batches = Some(BatchFigures::of_groups(plan, &groups, sizes)?);
    Ok(report)
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
