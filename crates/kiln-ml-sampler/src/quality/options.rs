//! What to measure: batch size, grouping, windows, lags, Monte Carlo effort.

use kiln_ml_core::{Error, Result};

/// Which unit counts as "the same file" in the measures.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Grouping {
    /// Samples are alike when they come from the same file (the default: what a reader opens).
    #[default]
    File,
    /// Samples are alike when they come from the same block (row group).
    Block,
}

/// Options of [`measure`](super::measure).
///
/// ```
/// use kiln_ml_sampler::quality::{Grouping, QualityOptions};
///
/// let options = QualityOptions::new(64).with_grouping(Grouping::Block);
/// assert_eq!(options.window_batches, 10);
/// assert_eq!(options.lags, vec![1, 64, 1024]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QualityOptions {
    /// Samples per batch, B (at least 2: the pair measures need two samples per batch).
    pub batch_size: usize,
    /// What counts as the same file.
    pub grouping: Grouping,
    /// Length of the first and last windows, in batches (default 10, so W = 10·B).
    pub window_batches: usize,
    /// Lags k for the lag-k same-file rate (default 1, B and 16·B).
    pub lags: Vec<usize>,
    /// Batches drawn from a uniform permutation to estimate the ideal values that have no closed
    /// form (default 4,000).
    pub monte_carlo_batches: usize,
    /// Seed of the Monte Carlo draws (default 0).
    pub seed: u64,
}

impl QualityOptions {
    /// Default options for batches of `batch_size` samples.
    pub fn new(batch_size: usize) -> Self {
        Self {
            batch_size,
            grouping: Grouping::File,
            window_batches: 10,
            lags: vec![1, batch_size, 16 * batch_size],
            monte_carlo_batches: 4_000,
            seed: 0,
        }
    }

    /// Sets what counts as the same file.
    pub fn with_grouping(self, grouping: Grouping) -> Self {
        Self { grouping, ..self }
    }

    /// Sets the window length in batches.
    pub fn with_window_batches(self, window_batches: usize) -> Self {
        Self {
            window_batches,
            ..self
        }
    }

    /// Sets the lags of the lag-k same-file rate.
    pub fn with_lags(self, lags: Vec<usize>) -> Self {
        Self { lags, ..self }
    }

    /// Sets the Monte Carlo effort and seed.
    pub fn with_monte_carlo(self, batches: usize, seed: u64) -> Self {
        Self {
            monte_carlo_batches: batches,
            seed,
            ..self
        }
    }

    /// Checks the options against an order of `positions` samples over a layout of `samples`.
    pub(crate) fn validate(&self, positions: usize, samples: u64) -> Result<()> {
        let invalid = |message: String| Err(Error::InvalidConfig(format!("quality: {message}")));
        if self.batch_size < 2 {
            return invalid(format!(
                "batch_size must be at least 2 to measure pairs, got {}",
                self.batch_size
            ));
        }
        if positions < self.batch_size {
            return invalid(format!(
                "the order has {positions} samples, fewer than one batch of {}",
                self.batch_size
            ));
        }
        // A padded plan can hold more positions than the layout has samples; the ideal batch
        // is drawn without replacement from the layout.
        if samples < self.batch_size as u64 {
            return invalid(format!(
                "the layout has {samples} samples, fewer than one batch of {}: a batch of \
                 distinct samples, the ideal the figures compare with, cannot be drawn",
                self.batch_size
            ));
        }
        if self.window_batches == 0 {
            return invalid("window_batches must be at least 1, got 0".to_owned());
        }
        if let Some(index) = self.lags.iter().position(|&lag| lag == 0) {
            return invalid(format!("lags[{index}] is 0; lags must be at least 1"));
        }
        if self.monte_carlo_batches < 2 {
            return invalid(format!(
                "monte_carlo_batches must be at least 2, got {}",
                self.monte_carlo_batches
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_field() {
        let check = |options: QualityOptions| options.validate(1000, 1000).unwrap_err().to_string();
        assert!(check(QualityOptions::new(1)).contains("batch_size"));
        assert!(check(QualityOptions::new(8).with_window_batches(0)).contains("window_batches"));
        assert!(check(QualityOptions::new(8).with_lags(vec![1, 0])).contains("lags[1]"));
        assert!(check(QualityOptions::new(8).with_monte_carlo(1, 0)).contains("monte_carlo"));
        let short = QualityOptions::new(64)
            .validate(10, 10)
            .unwrap_err()
            .to_string();
        assert!(short.contains("10 samples"), "{short}");
        // A padded order longer than the layout: the layout decides.
        let padded = QualityOptions::new(64)
            .validate(128, 10)
            .unwrap_err()
            .to_string();
        assert!(padded.contains("layout has 10 samples"), "{padded}");
        assert!(QualityOptions::new(8).validate(8, 8).is_ok());
    }
}
