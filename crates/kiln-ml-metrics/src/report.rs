//! [`MetricReport`]: the values computed from the sums.

use serde::{Deserialize, Serialize};

use crate::config::MetricsConfig;
use crate::precision_sums::PrecisionSums;
use crate::sums::{HorizonSums, MetricSums, TopKSums};

/// Every metric at every configured horizon and K.
///
/// A value is `None` when nothing was measured for it (no batch yet, every agent masked out,
/// or no probabilities for the probability-aware metrics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricReport {
    /// The configuration's name.
    pub config: String,
    /// One entry per configured horizon, in configuration order.
    pub horizons: Vec<HorizonReport>,
}

/// The metrics at one horizon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HorizonReport {
    /// The configured last step (`None`: the last step of each batch).
    pub last_step: Option<usize>,
    /// Predictions seen (agents, or joint predictions).
    pub units: u64,
    /// Predictions with an ADE (at least one valid step).
    pub ade_units: u64,
    /// Predictions with an FDE (a valid final step).
    pub fde_units: u64,
    /// ADE of the top-ranked hypothesis (the most probable, or the first), in meters.
    pub ade: Option<f64>,
    /// FDE of the top-ranked hypothesis, in meters.
    pub fde: Option<f64>,
    /// One entry per configured K, in configuration order.
    pub top_k: Vec<TopKReport>,
}

/// The metrics of one K at one horizon.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TopKReport {
    /// The configured K (a batch with fewer modes uses all of them).
    pub k: usize,
    /// minADE@K in meters.
    pub min_ade: Option<f64>,
    /// minFDE@K in meters.
    pub min_fde: Option<f64>,
    /// Miss rate@K, a fraction in [0, 1].
    pub miss_rate: Option<f64>,
    /// brier-minADE@K: minADE + (1 - p)^2.
    pub brier_min_ade: Option<f64>,
    /// brier-minFDE@K: minFDE + (1 - p)^2.
    pub brier_min_fde: Option<f64>,
    /// p-minADE@K: minADE + min(-ln p, -ln floor).
    pub p_min_ade: Option<f64>,
    /// p-minFDE@K: minFDE + min(-ln p, -ln floor).
    pub p_min_fde: Option<f64>,
    /// p-MR@K: 1 for a miss, 1 - p otherwise.
    pub p_miss_rate: Option<f64>,
    /// Actor miss rate@K, for joint predictions (`agents_per_prediction > 1`): the share of
    /// agents that miss in the selected joint hypothesis (the one with the lowest mean FDE), as
    /// av2's `compute_world_misses` read at the best world. `miss_rate` counts a joint
    /// prediction once, as a miss when any of its agents misses. `None` for single agents.
    pub actor_miss_rate: Option<f64>,
    /// Waymo's mAP@K: average precision per trajectory-type bucket, averaged over the buckets
    /// with samples. Host batches with trajectory types and probabilities only.
    pub mean_average_precision: Option<f64>,
    /// Waymo's soft mAP@K: mAP with the matches after a prediction's first left out instead of
    /// counted as false positives.
    pub soft_mean_average_precision: Option<f64>,
    /// Waymo's overlap rate@K: the share of predictions whose most confident hypothesis overlaps
    /// another object's box at a step up to the horizon. Host batches with scene boxes only.
    pub overlap_rate: Option<f64>,
}

impl MetricReport {
    /// The values of `sums` under `config`.
    pub fn new(config: &MetricsConfig, sums: &MetricSums) -> Self {
        let horizons = config
            .horizons
            .iter()
            .zip(&sums.horizons)
            .map(|(horizon, sums)| HorizonReport::new(horizon.last_step, &config.top_k, sums))
            .collect();
        Self {
            config: config.name.clone(),
            horizons,
        }
    }

    /// The entry for `k` at the first horizon (the only one in most presets).
    pub fn at(&self, k: usize) -> Option<&TopKReport> {
        self.horizons.first()?.at(k)
    }
}

impl HorizonReport {
    fn new(last_step: Option<usize>, top_k: &[usize], sums: &HorizonSums) -> Self {
        Self {
            last_step,
            units: sums.units,
            ade_units: sums.ade.count,
            fde_units: sums.fde.count,
            ade: sums.ade.value(),
            fde: sums.fde.value(),
            // A state saved before mAP existed has no precision sums: its entries still report,
            // with no mAP.
            top_k: top_k
                .iter()
                .zip(&sums.top_k)
                .enumerate()
                .map(|(index, (&k, top))| {
                    let none = PrecisionSums::default();
                    let precision = sums.precision.get(index).unwrap_or(&none);
                    TopKReport::new(k, top, precision)
                })
                .collect(),
        }
    }

    /// The entry for `k`, if configured.
    pub fn at(&self, k: usize) -> Option<&TopKReport> {
        self.top_k.iter().find(|entry| entry.k == k)
    }
}

impl TopKReport {
    fn new(k: usize, sums: &TopKSums, precision: &PrecisionSums) -> Self {
        Self {
            k,
            min_ade: sums.min_ade.value(),
            min_fde: sums.min_fde.value(),
            miss_rate: sums.miss.value(),
            brier_min_ade: sums.brier_min_ade.value(),
            brier_min_fde: sums.brier_min_fde.value(),
            p_min_ade: sums.p_min_ade.value(),
            p_min_fde: sums.p_min_fde.value(),
            p_miss_rate: sums.p_miss.value(),
            actor_miss_rate: sums.actor_miss.value(),
            mean_average_precision: precision.mean_average_precision(false),
            soft_mean_average_precision: precision.mean_average_precision(true),
            overlap_rate: sums.overlap.value(),
        }
    }
}
