//! The decision: from two measured runs (a batch cached on the device, and the real loader) to
//! a verdict with its evidence. Pure, so every rule is tested on fixed numbers.

use serde::{Deserialize, Serialize};

/// What limits the training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The data pipeline: the device waits for batches. More loader workers, a cache of
    /// preprocessed samples, or cheaper transforms help; a faster device does not.
    InputBound,
    /// The device's arithmetic: the data keeps up. Mixed precision, a larger batch or a faster
    /// device help.
    ComputeBound,
    /// The host's launching of work: even with the batch cached, the device sits idle between
    /// small kernels or syncs. Larger batches, fusion and fewer readbacks help.
    HostOverheadBound,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::InputBound => "input-bound",
            Verdict::ComputeBound => "compute-bound",
            Verdict::HostOverheadBound => "host-overhead-bound",
        })
    }
}

/// The thresholds of the rules; written into every diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Input-bound when the real loader reaches less than this fraction of the cached batch's
    /// steps per second (0.8).
    pub input_bound_ratio: f64,
    /// Input-bound when more than this share of the real run's time is spent waiting for data
    /// (0.2) and the device is not busy.
    pub data_wait_share: f64,
    /// A device busy less than this percent of the time is idle (50).
    pub idle_utilization_percent: f64,
    /// A real run below `input_bound_ratio` is input-bound only when waiting for data explains
    /// at least this fraction of the time it lost against the cached run (0.5). Otherwise the
    /// loader's work slows the step itself, competing with it for the host's cores, which more
    /// loader workers would not cure.
    #[serde(default = "default_explained_wait_fraction")]
    pub explained_wait_fraction: f64,
}

fn default_explained_wait_fraction() -> f64 {
    0.5
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            input_bound_ratio: 0.8,
            data_wait_share: 0.2,
            idle_utilization_percent: 50.0,
            explained_wait_fraction: default_explained_wait_fraction(),
        }
    }
}

/// One measured run of steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeasurement {
    /// Steps measured (after warm-up).
    pub steps: usize,
    /// Their wall time, in seconds.
    pub seconds: f64,
    /// Steps per second.
    pub steps_per_s: f64,
    /// Of the wall time, the time spent waiting for data, in seconds.
    pub data_wait_seconds: f64,
    /// `data_wait_seconds / seconds`.
    pub data_wait_share: f64,
    /// The device's mean utilization during the run (NVML), when known.
    pub gpu_utilization_percent: Option<f64>,
    /// The losses the steps reported, in order (the cached run's show whether it learns). In
    /// JSON a non-finite loss is `null`, read back as `NaN`.
    #[serde(with = "crate::serde_losses")]
    pub losses: Vec<f64>,
}

/// The verdict, with what led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// What limits the step.
    pub verdict: Verdict,
    /// The steps on one batch kept on the device.
    pub cached: RunMeasurement,
    /// The steps fed by the real loader.
    pub real: RunMeasurement,
    /// `real.steps_per_s / cached.steps_per_s`.
    pub throughput_ratio: f64,
    /// Whether the loss on the cached batch went down (the first third's mean above the last
    /// third's); `None` when the steps reported no loss.
    pub cached_loss_decreased: Option<bool>,
    /// The rules that decided, in words, with their numbers.
    pub evidence: Vec<String>,
    /// What else looks wrong (a loss that does not go down on one batch is a bug, not a
    /// bottleneck).
    pub warnings: Vec<String>,
    /// The thresholds used.
    pub thresholds: Thresholds,
}

/// Decides from the two runs.
pub fn decide_bottleneck(
    cached: RunMeasurement,
    real: RunMeasurement,
    thresholds: Thresholds,
) -> Diagnosis {
    let ratio = if cached.steps_per_s > 0.0 {
        real.steps_per_s / cached.steps_per_s
    } else {
        0.0
    };
    let mut evidence = vec![format!(
        "the real loader runs {:.2} steps/s, the cached batch {:.2} steps/s: ratio {ratio:.2} \
         (input-bound below {:.2})",
        real.steps_per_s, cached.steps_per_s, thresholds.input_bound_ratio
    )];
    evidence.push(format!(
        "waiting for data takes {:.1}% of the real run (input-bound above {:.1}% when the \
         device is not busy)",
        100.0 * real.data_wait_share,
        100.0 * thresholds.data_wait_share
    ));
    let idle = |utilization: Option<f64>| {
        utilization.map(|percent| percent < thresholds.idle_utilization_percent)
    };
    // Each run's figure on its own: the data-wait rule reads the real run's alone.
    let percent = |utilization: Option<f64>| match utilization {
        Some(percent) => format!("{percent:.0}%"),
        None => "unknown (no NVML samples in the run)".to_owned(),
    };
    match (real.gpu_utilization_percent, cached.gpu_utilization_percent) {
        (None, None) => evidence.push(
            "device utilization unknown for these runs (no NVML samples in them): host overhead \
             cannot be told from compute"
                .to_owned(),
        ),
        (real_util, cached_util) => evidence.push(format!(
            "device utilization: {} with the loader, {} on the cached batch (idle below {:.0}%)",
            percent(real_util),
            percent(cached_util),
            thresholds.idle_utilization_percent
        )),
    }
    // The share of the real run's time lost against the cached pace, and whether waiting for
    // data accounts for enough of it (a cached run that made no progress decides nothing).
    let lost_share = (1.0 - ratio).max(0.0);
    let wait_explains_loss =
        real.data_wait_share >= thresholds.explained_wait_fraction * lost_share;
    let slower_than_cached = cached.steps_per_s > 0.0 && ratio < thresholds.input_bound_ratio;
    let contended = slower_than_cached && !wait_explains_loss;
    let waits_while_idle = real.data_wait_share > thresholds.data_wait_share
        && idle(real.gpu_utilization_percent) != Some(false);
    if contended && !waits_while_idle {
        evidence.push(format!(
            "the real run loses {:.0}% of its time against the cached pace but spends only \
             {:.1}% of it waiting for data: the loader's work competes with the step for the \
             host's cores (not input-bound: fewer or cheaper loader workers help, more do not)",
            100.0 * lost_share,
            100.0 * real.data_wait_share
        ));
    }
    let slower_than_cached = slower_than_cached && wait_explains_loss;
    let verdict = if slower_than_cached || waits_while_idle {
        Verdict::InputBound
    } else if idle(cached.gpu_utilization_percent) == Some(true) {
        Verdict::HostOverheadBound
    } else {
        Verdict::ComputeBound
    };
    let cached_loss_decreased = loss_decreased(&cached.losses);
    let mut warnings = Vec::new();
    if cached.steps_per_s <= 0.0 {
        warnings.push(format!(
            "the cached run made no measurable progress ({} steps/s): the throughput ratio \
             decides nothing, only the data wait and utilization rules did",
            cached.steps_per_s
        ));
    }
    if cached_loss_decreased == Some(false) {
        warnings.push(format!(
            "the loss on the cached batch did not go down over {} steps: check the model, the \
             loss and the learning rate before tuning speed",
            cached.losses.len()
        ));
    }
    Diagnosis {
        verdict,
        cached,
        real,
        throughput_ratio: ratio,
        cached_loss_decreased,
        evidence,
        warnings,
        thresholds,
    }
}

/// Whether the mean of the last third of `losses` is below the mean of the first third.
fn loss_decreased(losses: &[f64]) -> Option<bool> {
    if losses.len() < 3 {
        return None;
    }
    let third = losses.len() / 3;
    let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len() as f64;
    Some(mean(&losses[losses.len() - third..]) < mean(&losses[..third]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(steps_per_s: f64, wait_share: f64, util: Option<f64>) -> RunMeasurement {
        RunMeasurement {
            steps: 10,
            seconds: 10.0 / steps_per_s,
            steps_per_s,
            data_wait_seconds: wait_share * 10.0 / steps_per_s,
            data_wait_share: wait_share,
            gpu_utilization_percent: util,
            losses: vec![3.0, 2.0, 1.0],
        }
    }

    #[test]
    fn each_rule_decides_its_case() {
        let t = Thresholds::default();
        let slow_loader = decide_bottleneck(run(10.0, 0.0, None), run(4.0, 0.6, None), t);
        assert_eq!(slow_loader.verdict, Verdict::InputBound);
        assert!((slow_loader.throughput_ratio - 0.4).abs() < 1e-12);
        // Throughput near the cached one, but the device waits and is idle.
        let waits = decide_bottleneck(run(10.0, 0.0, Some(90.0)), run(9.0, 0.3, Some(30.0)), t);
        assert_eq!(waits.verdict, Verdict::InputBound);
        // Waiting while the device is busy anyway is not input-bound.
        let busy = decide_bottleneck(run(10.0, 0.0, Some(95.0)), run(9.5, 0.3, Some(90.0)), t);
        assert_eq!(busy.verdict, Verdict::ComputeBound);
        let launch = decide_bottleneck(run(10.0, 0.0, Some(20.0)), run(9.8, 0.01, Some(20.0)), t);
        assert_eq!(launch.verdict, Verdict::HostOverheadBound);
        let compute = decide_bottleneck(run(10.0, 0.0, None), run(9.9, 0.01, None), t);
        assert_eq!(compute.verdict, Verdict::ComputeBound);
        assert!(compute.evidence.iter().any(|line| line.contains("unknown")));
        // The cached run too short for a sample: the real run's 30% still decides, and the
        // evidence shows it.
        let short = decide_bottleneck(run(10.0, 0.0, None), run(9.0, 0.3, Some(30.0)), t);
        assert_eq!(short.verdict, Verdict::InputBound);
        let line = short
            .evidence
            .iter()
            .find(|line| line.starts_with("device utilization"))
            .unwrap();
        assert!(line.contains("30% with the loader"), "{line}");
        assert!(
            line.contains("unknown (no NVML samples in the run) on the cached"),
            "{line}"
        );
    }

    #[test]
    fn a_cached_run_without_progress_decides_nothing_by_itself() {
        let t = Thresholds::default();
        let mut stalled = run(10.0, 0.0, None);
        stalled.steps_per_s = 0.0;
        let never_waits = decide_bottleneck(stalled.clone(), run(10.0, 0.0, None), t);
        assert_eq!(never_waits.verdict, Verdict::ComputeBound);
        assert!(
            never_waits
                .warnings
                .iter()
                .any(|line| line.contains("no measurable progress")),
            "{:?}",
            never_waits.warnings
        );
        // The wait rule still decides on its own.
        let starved = decide_bottleneck(stalled, run(10.0, 0.6, None), t);
        assert_eq!(starved.verdict, Verdict::InputBound);
    }

    #[test]
    fn a_slower_run_that_never_waits_for_data_is_not_input_bound() {
        let t = Thresholds::default();
        // 22% of the time lost, 0.1% spent waiting: the loader competes for the cores.
        let contended = decide_bottleneck(run(36.4, 0.0, None), run(28.5, 0.001, None), t);
        assert_eq!(contended.verdict, Verdict::ComputeBound);
        assert!(
            contended
                .evidence
                .iter()
                .any(|line| line.contains("competes with the step")),
            "{:?}",
            contended.evidence
        );
        // The same loss of pace with waiting to explain it is input-bound.
        let starved = decide_bottleneck(run(36.4, 0.0, None), run(28.5, 0.15, None), t);
        assert_eq!(starved.verdict, Verdict::InputBound);
        // Thresholds written before the rule existed still read.
        let old: Thresholds = serde_json::from_str(
            r#"{"input_bound_ratio":0.8,"data_wait_share":0.2,"idle_utilization_percent":50.0}"#,
        )
        .unwrap();
        assert_eq!(old, t);
    }

    #[test]
    fn a_loss_that_does_not_fall_on_one_batch_is_a_warning() {
        let mut cached = run(10.0, 0.0, None);
        cached.losses = vec![1.0, 1.0, 1.1, 1.2, 1.2, 1.3];
        let diagnosis = decide_bottleneck(cached, run(10.0, 0.0, None), Thresholds::default());
        assert_eq!(diagnosis.cached_loss_decreased, Some(false));
        assert_eq!(diagnosis.warnings.len(), 1);
        assert_eq!(loss_decreased(&[1.0, 0.5]), None);
        assert_eq!(loss_decreased(&[3.0, 2.0, 1.0]), Some(true));
    }
}
