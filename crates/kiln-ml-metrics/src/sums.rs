//! Sum/count accumulators: the whole state of the metrics, merged exactly across threads and ranks.

use serde::{Deserialize, Serialize};

use crate::precision_sums::PrecisionSums;

/// A running mean kept as (sum, count), so two means merge into the mean of everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Mean {
    /// Sum of the measured values.
    pub sum: f64,
    /// Number of measured values.
    pub count: u64,
}

impl Mean {
    /// Adds one measurement.
    #[inline]
    pub fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    /// Adds `count` measurements whose values sum to `sum`.
    #[inline]
    pub fn add_many(&mut self, sum: f64, count: u64) {
        self.sum += sum;
        self.count += count;
    }

    /// Adds another mean's state.
    pub fn merge(&mut self, other: &Mean) {
        self.sum += other.sum;
        self.count += other.count;
    }

    /// The mean, or `None` when nothing was measured.
    pub fn value(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// The sums of one K value at one horizon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TopKSums {
    /// minADE@K.
    pub min_ade: Mean,
    /// minFDE@K.
    pub min_fde: Mean,
    /// Miss rate@K (sum of 0/1 misses).
    pub miss: Mean,
    /// brier-minADE@K.
    pub brier_min_ade: Mean,
    /// brier-minFDE@K.
    pub brier_min_fde: Mean,
    /// p-minADE@K.
    pub p_min_ade: Mean,
    /// p-minFDE@K.
    pub p_min_fde: Mean,
    /// p-MR@K.
    pub p_miss: Mean,
    /// Actor miss rate@K: misses counted per agent of the selected joint hypothesis.
    #[serde(default)]
    pub actor_miss: Mean,
    /// Overlap rate@K (host batches with [`SceneBoxes`](crate::SceneBoxes) only).
    #[serde(default)]
    pub overlap: Mean,
}

impl TopKSums {
    /// The means both paths measure, in a fixed order (the order of the fields), which the
    /// tensor path follows; the overlap rate is measured on the host only.
    pub(crate) fn means_mut(&mut self) -> [&mut Mean; 9] {
        [
            &mut self.min_ade,
            &mut self.min_fde,
            &mut self.miss,
            &mut self.brier_min_ade,
            &mut self.brier_min_fde,
            &mut self.p_min_ade,
            &mut self.p_min_fde,
            &mut self.p_miss,
            &mut self.actor_miss,
        ]
    }

    fn merge(&mut self, other: &TopKSums) {
        let mut other = *other;
        for (mine, theirs) in self.means_mut().into_iter().zip(other.means_mut()) {
            mine.merge(theirs);
        }
        self.overlap.merge(&other.overlap);
    }
}

/// The sums of one horizon.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HorizonSums {
    /// Predictions seen (agents, or joint predictions), measured or not.
    pub units: u64,
    /// ADE of the top-ranked hypothesis.
    pub ade: Mean,
    /// FDE of the top-ranked hypothesis.
    pub fde: Mean,
    /// One entry per configured K, in configuration order.
    pub top_k: Vec<TopKSums>,
    /// mAP samples per configured K, in configuration order (host batches with trajectory
    /// types only). States saved before mAP existed load with none.
    #[serde(default)]
    pub precision: Vec<PrecisionSums>,
}

/// The whole state: one [`HorizonSums`] per configured horizon, in configuration order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricSums {
    /// Per horizon.
    pub horizons: Vec<HorizonSums>,
}

impl MetricSums {
    /// Empty sums for `horizons` horizons of `top_k` K values each.
    pub fn zeros(horizons: usize, top_k: usize) -> Self {
        Self {
            horizons: vec![
                HorizonSums {
                    top_k: vec![TopKSums::default(); top_k],
                    precision: vec![PrecisionSums::default(); top_k],
                    ..HorizonSums::default()
                };
                horizons
            ],
        }
    }

    /// Empty sums shaped for `config`'s horizons and K values.
    pub fn for_config(config: &crate::MetricsConfig) -> Self {
        Self::zeros(config.horizons.len(), config.top_k.len())
    }

    /// Whether `other` has the same horizons and K values, so the two can merge.
    pub fn same_layout(&self, other: &MetricSums) -> bool {
        self.horizons.len() == other.horizons.len()
            && self.horizons.iter().zip(&other.horizons).all(|(a, b)| {
                // A state saved before mAP existed has no precision sums: it merges.
                let precision = a.precision.is_empty()
                    || b.precision.is_empty()
                    || a.precision.len() == b.precision.len();
                a.top_k.len() == b.top_k.len() && precision
            })
    }

    /// Adds another state of the same layout (see [`same_layout`](Self::same_layout)); extra
    /// horizons or K values of a different layout are ignored.
    pub fn merge(&mut self, other: &MetricSums) {
        for (mine, theirs) in self.horizons.iter_mut().zip(&other.horizons) {
            mine.units += theirs.units;
            mine.ade.merge(&theirs.ade);
            mine.fde.merge(&theirs.fde);
            for (a, b) in mine.top_k.iter_mut().zip(&theirs.top_k) {
                a.merge(b);
            }
            if mine.precision.len() < theirs.precision.len() {
                mine.precision
                    .resize(theirs.precision.len(), PrecisionSums::default());
            }
            for (a, b) in mine.precision.iter_mut().zip(&theirs.precision) {
                a.merge(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_means_equal_one_pass() {
        let mut left = MetricSums::zeros(2, 1);
        let mut right = MetricSums::zeros(2, 1);
        left.horizons[1].top_k[0].min_fde.add(1.0);
        right.horizons[1].top_k[0].min_fde.add(3.0);
        right.horizons[0].units = 5;
        left.merge(&right);
        assert_eq!(left.horizons[1].top_k[0].min_fde.value(), Some(2.0));
        assert_eq!(left.horizons[0].units, 5);
        assert_eq!(left.horizons[0].ade.value(), None);
        assert!(left.same_layout(&right));
        assert!(!left.same_layout(&MetricSums::zeros(2, 2)));
        // A state serialized before the actor miss rate, overlap and mAP existed still loads
        // and merges.
        let old = r#"{"horizons":[{"units":3,"ade":{"sum":1.0,"count":1},"fde":{"sum":0.0,"count":0},
            "top_k":[{"min_ade":{"sum":0.0,"count":0},"min_fde":{"sum":2.0,"count":1},
            "miss":{"sum":0.0,"count":0},"brier_min_ade":{"sum":0.0,"count":0},
            "brier_min_fde":{"sum":0.0,"count":0},"p_min_ade":{"sum":0.0,"count":0},
            "p_min_fde":{"sum":0.0,"count":0},"p_miss":{"sum":0.0,"count":0}}]}]}"#;
        let mut old: MetricSums = serde_json::from_str(old).unwrap();
        // Reported as it is, its top-K entry is there (with no mAP).
        let mut config = crate::MetricsConfig::argoverse2();
        config.top_k = vec![6];
        let report = crate::MetricReport::new(&config, &old);
        assert_eq!(report.at(6).and_then(|entry| entry.min_fde), Some(2.0));
        let current = MetricSums::zeros(1, 1);
        assert!(old.same_layout(&current));
        old.merge(&current);
        assert_eq!(old.horizons[0].precision.len(), 1);
        assert_eq!(old.horizons[0].top_k[0].min_fde.value(), Some(2.0));
    }
}
