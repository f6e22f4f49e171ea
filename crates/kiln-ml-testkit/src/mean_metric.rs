//! A sum/count metric: the simplest exact-merge accumulator.

use kiln_ml_core::Metric;

/// Why a [`MeanMetric`] rejected an input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("value {index} is not finite: {value}")]
pub struct NonFiniteValue {
    /// Index of the value in the update.
    pub index: usize,
    /// The value.
    pub value: f64,
}

/// The mean of every value passed to [`update`](Metric::update); rejects non-finite values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeanMetric {
    sum: f64,
    count: u64,
}

impl Metric<[f64]> for MeanMetric {
    type Value = Option<f64>;
    type Error = NonFiniteValue;

    fn update(&mut self, values: &[f64]) -> Result<(), NonFiniteValue> {
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(NonFiniteValue { index, value });
        }
        self.sum += values.iter().sum::<f64>();
        self.count += values.len() as u64;
        Ok(())
    }

    fn merge(&mut self, other: &Self) {
        self.sum += other.sum;
        self.count += other.count;
    }

    fn compute(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    fn reset(&mut self) {
        *self = Self::default();
    }
}
