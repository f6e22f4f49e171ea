//! What variable-size samples cost a batch: padding waste and elements per batch.

use kiln_ml_core::{Error, Result, SampleId};

use crate::size_budget::sample_size;

/// The size figures of an order cut into batches, for samples of different sizes (pulses per
/// event, nodes per graph).
///
/// A batch padded to its longest sample holds `rows × longest` elements, of which the sum of
/// the sizes are real: padding waste is the padded elements over the real ones, over all
/// batches (0 when every batch's samples are equally long).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SizeFigures {
    /// Batches measured.
    pub batches: usize,
    /// Padding elements over real elements, over all batches, when each batch is padded to its
    /// longest sample.
    pub padding_waste: f64,
    /// Real elements per batch (the sum of its sizes): the mean.
    pub mean_elements: f64,
    /// Real elements per batch: the largest (a packed batch's peak).
    pub max_elements: u64,
    /// `rows × longest` per batch: the largest (a padded batch's peak).
    pub max_padded_elements: u64,
}

impl SizeFigures {
    /// The figures of `order` cut into batches of `batch_size` consecutive positions (the last
    /// may be shorter), with `sizes[sample]` each sample's size.
    ///
    /// ```
    /// use kiln_ml_sampler::quality::SizeFigures;
    ///
    /// let sizes = [1, 9, 1, 9];
    /// // Mixed batches pad the short samples to 9; batches by length waste nothing.
    /// let mixed = SizeFigures::of_batches(&[0, 1, 2, 3], &sizes, 2).unwrap();
    /// assert_eq!(mixed.padding_waste, 16.0 / 20.0);
    /// let grouped = SizeFigures::of_batches(&[0, 2, 1, 3], &sizes, 2).unwrap();
    /// assert_eq!((grouped.padding_waste, grouped.max_elements), (0.0, 18));
    /// ```
    pub fn of_batches(order: &[SampleId], sizes: &[u64], batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        let batches = order
            .chunks(batch_size)
            .enumerate()
            .map(|(batch, samples)| (batch * batch_size, samples));
        Self::of(batches, sizes)
    }

    /// The figures of `order` cut at `ends` (one past each batch's last position, increasing,
    /// the last one `order.len()`), as [`SizeBudget`](crate::SizeBudget) cuts it.
    pub fn of_ends(order: &[SampleId], sizes: &[u64], ends: &[u64]) -> Result<Self> {
        let mut start = 0usize;
        let mut batches = Vec::with_capacity(ends.len());
        for &end in ends {
            let end = end as usize;
            if end <= start || end > order.len() {
                return Err(Error::InvalidConfig(format!(
                    "batch ends must increase within the order's {} positions: {end} after {start}",
                    order.len()
                )));
            }
            batches.push((start, &order[start..end]));
            start = end;
        }
        if start != order.len() {
            return Err(Error::InvalidConfig(format!(
                "the batch ends stop at {start} of the order's {} positions",
                order.len()
            )));
        }
        Self::of(batches.into_iter(), sizes)
    }

    /// The figures of `batches` (each with its first position, for errors).
    fn of<'a>(
        batches: impl Iterator<Item = (usize, &'a [SampleId])>,
        sizes: &[u64],
    ) -> Result<Self> {
        let (mut real, mut padded) = (0u64, 0u64);
        let (mut max_elements, mut max_padded_elements) = (0u64, 0u64);
        let mut count = 0;
        for (first, samples) in batches {
            let (mut sum, mut longest) = (0u64, 0u64);
            for (offset, &sample) in samples.iter().enumerate() {
                let size = sample_size(sizes, first + offset, sample)?;
                sum = sum.saturating_add(size);
                longest = longest.max(size);
            }
            // Saturating: figures of sizes near `u64::MAX` are capped, not a panic.
            let padded_batch = (samples.len() as u64).saturating_mul(longest);
            real = real.saturating_add(sum);
            padded = padded.saturating_add(padded_batch);
            max_elements = max_elements.max(sum);
            max_padded_elements = max_padded_elements.max(padded_batch);
            count += 1;
        }
        Ok(Self {
            batches: count,
            padding_waste: if real == 0 {
                0.0
            } else {
                (padded - real) as f64 / real as f64
            },
            mean_elements: if count == 0 {
                0.0
            } else {
                real as f64 / count as f64
            },
            max_elements,
            max_padded_elements,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_last_batch_counts_its_own_rows() {
        // Batches [5, 1] and [2]: padded 2 × 5 + 1 × 2 = 12 against 8 real.
        let figures = SizeFigures::of_batches(&[0, 1, 2], &[5, 1, 2], 2).unwrap();
        assert_eq!(figures.batches, 2);
        assert_eq!(figures.padding_waste, 4.0 / 8.0);
        assert_eq!((figures.mean_elements, figures.max_elements), (4.0, 6));
        assert_eq!(figures.max_padded_elements, 10);
    }

    #[test]
    fn figures_of_huge_sizes_saturate() {
        let figures = SizeFigures::of_batches(&[0, 1], &[u64::MAX, 1], 2).unwrap();
        assert_eq!(figures.max_elements, u64::MAX);
        assert_eq!(figures.max_padded_elements, u64::MAX);
    }

    #[test]
    fn unknown_samples_and_a_zero_batch_size_are_refused() {
        let error = SizeFigures::of_batches(&[0, 3], &[1, 2], 2).unwrap_err();
        assert!(error.to_string().contains("sample 3"), "{error}");
        assert!(SizeFigures::of_batches(&[0], &[1], 0).is_err());
        assert!(
            SizeFigures::of_ends(&[0, 1], &[1, 2], &[1]).is_err(),
            "short"
        );
        assert!(
            SizeFigures::of_ends(&[0, 1], &[1, 2], &[1, 1, 2]).is_err(),
            "empty batch"
        );
        let ends = SizeFigures::of_ends(&[0, 1, 2], &[5, 1, 2], &[2, 3]).unwrap();
        assert_eq!(
            ends,
            SizeFigures::of_batches(&[0, 1, 2], &[5, 1, 2], 2).unwrap()
        );
        let empty = SizeFigures::of_batches(&[], &[], 4).unwrap();
        assert_eq!(
            (empty.batches, empty.padding_waste, empty.mean_elements),
            (0, 0.0, 0.0)
        );
    }
}
