//! Min, mean and max of the monitor's figures: over a run, per phase, per epoch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::DeviceSample;
use crate::phase::{Action, EpochBounds, Span};

/// Min, mean and max of one figure over the samples that had it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MonitorStats {
    /// The smallest value.
    pub min: f64,
    /// The arithmetic mean.
    pub mean: f64,
    /// The largest value.
    pub max: f64,
    /// How many samples had the figure.
    pub count: usize,
}

/// Summaries of a set of samples: [`MonitorStats`] per numeric field of [`DeviceSample`] (by field
/// name, only fields some sample had), and how many samples named each throttle reason.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MonitorSummary {
    /// How many samples were summarized.
    pub samples: usize,
    /// Per field name (`gpu_utilization_percent`, `pool_in_use_bytes`, ...).
    pub fields: BTreeMap<String, MonitorStats>,
    /// Per throttle reason (`sw_power_cap`, ...): the number of samples that named it.
    pub throttle_reasons: BTreeMap<String, usize>,
}

impl MonitorSummary {
    /// The stats of the field named `name`, if any sample had it.
    pub fn get(&self, name: &str) -> Option<&MonitorStats> {
        self.fields.get(name)
    }
}

/// Summarizes `samples`.
pub fn summarize_samples<'a>(
    samples: impl IntoIterator<Item = &'a DeviceSample>,
) -> MonitorSummary {
    #[derive(Clone, Copy)]
    struct Acc {
        min: f64,
        max: f64,
        sum: f64,
        count: usize,
    }
    let mut acc: BTreeMap<&'static str, Acc> = BTreeMap::new();
    let mut summary = MonitorSummary::default();
    for sample in samples {
        summary.samples += 1;
        for (name, value) in sample.numeric_fields() {
            let Some(value) = value else { continue };
            let entry = acc.entry(name).or_insert(Acc {
                min: value,
                max: value,
                sum: 0.0,
                count: 0,
            });
            entry.min = entry.min.min(value);
            entry.max = entry.max.max(value);
            entry.sum += value;
            entry.count += 1;
        }
        for reason in sample.gpu_throttle_reasons.iter().flatten() {
            *summary.throttle_reasons.entry(reason.clone()).or_default() += 1;
        }
    }
    summary.fields = acc
        .into_iter()
        .map(|(name, acc)| {
            let stats = MonitorStats {
                min: acc.min,
                mean: acc.sum / acc.count as f64,
                max: acc.max,
                count: acc.count,
            };
            (name.to_owned(), stats)
        })
        .collect();
    summary
}

/// Summaries per phase: a sample belongs to the span whose `[start, end)` holds its `at`.
/// [`Action::Step`] spans are ignored (they cover the phases). An [`Action::FirstStep`] span
/// (from the start of `fit` to the end of its first step: kernel compilation on a GPU) covers
/// that step's phases too, and takes every sample inside it but those of validation and
/// checkpoints before the step (a resumed run's), so the phases' rows describe steady steps,
/// as the phase table's do. Samples outside every span are left out, and so are
/// actions no sample fell in. The phases of a run do not overlap; if two did, a sample in both
/// would go to the one that started later.
pub fn summaries_by_phase(
    samples: &[DeviceSample],
    spans: &[Span],
) -> BTreeMap<Action, MonitorSummary> {
    let first_steps: Vec<&Span> = spans
        .iter()
        .filter(|span| span.action == Action::FirstStep)
        .collect();
    let mut phases: Vec<&Span> = spans
        .iter()
        .filter(|span| !matches!(span.action, Action::Step | Action::FirstStep))
        .collect();
    phases.sort_by_key(|span| span.start);
    let mut grouped: BTreeMap<Action, Vec<&DeviceSample>> = BTreeMap::new();
    for sample in samples {
        let after = phases.partition_point(|span| span.start <= sample.at);
        let phase = after
            .checked_sub(1)
            .map(|index| phases[index])
            .filter(|span| sample.at < span.end());
        let between_steps = phase
            .is_some_and(|span| matches!(span.action, Action::Validation | Action::Checkpoint));
        let in_first_step = first_steps
            .iter()
            .any(|span| span.start <= sample.at && sample.at < span.end());
        let action = match phase {
            _ if in_first_step && !between_steps => Action::FirstStep,
            Some(span) => span.action,
            None => continue,
        };
        grouped.entry(action).or_default().push(sample);
    }
    grouped
        .into_iter()
        .map(|(action, samples)| (action, summarize_samples(samples)))
        .collect()
}

/// Summaries per epoch: a sample belongs to the epoch whose `[start, end)` on the profile's
/// clock holds its `at`; an epoch still open (`end` is `None`) runs to the last sample. Epochs
/// no sample fell in are left out.
pub fn summaries_by_epoch(
    samples: &[DeviceSample],
    epochs: &[EpochBounds],
) -> BTreeMap<u64, MonitorSummary> {
    epochs
        .iter()
        .filter_map(|bounds| {
            let within: Vec<&DeviceSample> = samples
                .iter()
                .filter(|sample| {
                    bounds.start <= sample.at && bounds.end.is_none_or(|end| sample.at < end)
                })
                .collect();
            (!within.is_empty()).then(|| (bounds.epoch, summarize_samples(within)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sample(at_ms: u64, gpu: Option<f64>) -> DeviceSample {
        DeviceSample {
            at: Duration::from_millis(at_ms),
            gpu_utilization_percent: gpu,
            ram_used_bytes: Some(at_ms * 10),
            ..DeviceSample::default()
        }
    }

    fn span(action: Action, start_ms: u64, end_ms: u64) -> Span {
        Span {
            action,
            step: 0,
            start: Duration::from_millis(start_ms),
            duration: Duration::from_millis(end_ms - start_ms),
            sync: None,
        }
    }

    #[test]
    fn stats_cover_the_samples_that_have_a_figure() {
        let mut throttled = sample(30, None);
        throttled.gpu_throttle_reasons = Some(vec!["sw_power_cap".into()]);
        let samples = [sample(10, Some(20.0)), sample(20, Some(80.0)), throttled];
        let summary = summarize_samples(&samples);
        assert_eq!(summary.samples, 3);
        let gpu = summary
            .get("gpu_utilization_percent")
            .expect("two samples had it");
        assert_eq!((gpu.min, gpu.max, gpu.count), (20.0, 80.0, 2));
        assert!((gpu.mean - 50.0).abs() < 1e-12);
        let ram = summary.get("ram_used_bytes").expect("every sample had it");
        assert_eq!((ram.min, ram.max, ram.count), (100.0, 300.0, 3));
        assert!((ram.mean - 200.0).abs() < 1e-9);
        assert!(summary.get("gpu_power_watts").is_none());
        assert_eq!(summary.throttle_reasons.get("sw_power_cap"), Some(&1));
    }

    #[test]
    fn samples_go_to_the_phase_holding_them_and_steps_are_ignored() {
        let spans = [
            span(Action::Step, 0, 100),
            span(Action::DataWait, 0, 20),
            span(Action::Forward, 20, 50),
            span(Action::Backward, 50, 90),
            // 90..100 is in the step but in no phase.
            span(Action::Step, 100, 200),
            span(Action::Forward, 100, 200),
        ];
        let samples: Vec<DeviceSample> = [0, 19, 20, 49, 50, 95, 150, 250]
            .into_iter()
            .map(|at| sample(at, Some(at as f64)))
            .collect();
        let phases = summaries_by_phase(&samples, &spans);
        let count = |action| phases.get(&action).map(|s: &MonitorSummary| s.samples);
        assert_eq!(count(Action::DataWait), Some(2));
        assert_eq!(count(Action::Forward), Some(3));
        assert_eq!(count(Action::Backward), Some(1));
        assert_eq!(count(Action::Step), None);
        assert_eq!(phases.len(), 3);
        let forward = phases[&Action::Forward].get("gpu_utilization_percent");
        assert_eq!(forward.map(|s| (s.min, s.max)), Some((20.0, 150.0)));
    }

    #[test]
    fn the_first_step_takes_its_samples_from_the_phases_it_covers() {
        let spans = [
            // `fit` starts at 0; its first step compiles until 300.
            span(Action::FirstStep, 0, 300),
            span(Action::Step, 10, 300),
            span(Action::Forward, 10, 200),
            span(Action::Backward, 200, 290),
            span(Action::Step, 300, 320),
            span(Action::Forward, 300, 310),
            span(Action::Backward, 310, 320),
        ];
        let samples: Vec<DeviceSample> = [5, 100, 250, 295, 305, 315]
            .into_iter()
            .map(|at| sample(at, Some(at as f64)))
            .collect();
        let phases = summaries_by_phase(&samples, &spans);
        let count = |action| phases.get(&action).map(|s: &MonitorSummary| s.samples);
        assert_eq!(count(Action::FirstStep), Some(4));
        assert_eq!(count(Action::Forward), Some(1));
        assert_eq!(count(Action::Backward), Some(1));
    }

    #[test]
    fn validation_before_the_first_step_keeps_its_samples() {
        // A resumed `fit` validates (0..100) and saves (100..120) before its first step.
        let spans = [
            span(Action::FirstStep, 0, 300),
            span(Action::Validation, 0, 100),
            span(Action::Checkpoint, 100, 120),
            span(Action::Step, 120, 300),
            span(Action::Forward, 120, 300),
        ];
        let samples: Vec<DeviceSample> = [50, 110, 200]
            .into_iter()
            .map(|at| sample(at, None))
            .collect();
        let phases = summaries_by_phase(&samples, &spans);
        let count = |action| phases.get(&action).map(|s: &MonitorSummary| s.samples);
        assert_eq!(count(Action::Validation), Some(1));
        assert_eq!(count(Action::Checkpoint), Some(1));
        assert_eq!(count(Action::FirstStep), Some(1));
        assert_eq!(count(Action::Forward), None);
    }

    #[test]
    fn samples_go_to_the_epoch_holding_them() {
        let samples: Vec<DeviceSample> =
            [5, 15, 25, 35, 45, 55].map(|at| sample(at, None)).to_vec();
        let bounds = |epoch, start_ms, end_ms: Option<u64>| EpochBounds {
            epoch,
            start: Duration::from_millis(start_ms),
            end: end_ms.map(Duration::from_millis),
        };
        let epochs = summaries_by_epoch(
            &samples,
            &[
                bounds(0, 0, Some(20)),
                bounds(1, 20, Some(30)),
                // Nothing falls in 30..32.
                bounds(2, 30, Some(32)),
                // Still open: runs to the last sample.
                bounds(3, 40, None),
            ],
        );
        assert_eq!(epochs.keys().copied().collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(epochs[&0].samples, 2);
        assert_eq!(epochs[&1].samples, 1);
        assert_eq!(epochs[&3].samples, 2);
    }
}
