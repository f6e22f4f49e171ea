//! One report of a profiled run: a JSON document with everything measured, and (feature `svg`)
//! an SVG timeline
//! (phases per step, device utilization and memory under them).

#[cfg(feature = "svg")]
mod svg;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[cfg(feature = "svg")]
pub use svg::write_timeline_svg;

use crate::batch_size::FinderReport;
use crate::monitor::{
    DeviceSample, MonitorRecord, MonitorSummary, SourceStatus, summaries_by_epoch,
    summaries_by_phase, summarize_samples,
};
use crate::phase::{EpochBounds, PhaseReport, PhaseTimer, Span};
use crate::{Diagnosis, Result, ThroughputReport};

/// Everything a profiled run measured; each part is present when it was measured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProfileReport {
    /// Where each step's time went.
    pub phases: Option<PhaseReport>,
    /// The device monitor's sources, available or not (with the reason).
    pub monitor_sources: Vec<SourceStatus>,
    /// Min/mean/max of the device figures over the run.
    pub device: Option<MonitorSummary>,
    /// The same per phase (`forward`, `data_wait`, ...).
    pub device_by_phase: BTreeMap<String, MonitorSummary>,
    /// The same per epoch.
    pub device_by_epoch: BTreeMap<u64, MonitorSummary>,
    /// The input-versus-compute verdict, when the cached-batch test ran.
    pub diagnosis: Option<Diagnosis>,
    /// Throughput and MFU over the last window.
    pub throughput: Option<ThroughputReport>,
    /// The batch-size search, when one ran.
    pub batch_size: Option<FinderReport>,
}

/// From the first span's or epoch's start to the last one's end; `None` without either.
fn run_bounds(
    spans: &[Span],
    epochs: &[EpochBounds],
) -> Option<std::ops::RangeInclusive<std::time::Duration>> {
    let starts = spans
        .iter()
        .map(|span| span.start)
        .chain(epochs.iter().map(|epoch| epoch.start));
    let ends = spans
        .iter()
        .map(Span::end)
        .chain(epochs.iter().filter_map(|epoch| epoch.end));
    Some(starts.min()?..=ends.max()?)
}

impl ProfileReport {
    /// The report of a run timed by `timer` and watched by a monitor (its stopped record).
    pub fn from_run(timer: &PhaseTimer, monitor: Option<&MonitorRecord>) -> Self {
        Self::from_timeline(timer.report(), &timer.spans(), &timer.epochs(), monitor)
    }

    /// The report of a run from its parts: the phase table, the spans and epochs the device
    /// figures are attributed to, and the monitor's record.
    pub fn from_timeline(
        phases: PhaseReport,
        spans: &[Span],
        epochs: &[EpochBounds],
        monitor: Option<&MonitorRecord>,
    ) -> Self {
        let mut report = Self {
            phases: Some(phases),
            ..Self::default()
        };
        if let Some(record) = monitor {
            report.monitor_sources = record.sources.clone();
            // Over the run: the monitor may start before it and stop after it.
            let in_run: Vec<&DeviceSample> = match run_bounds(spans, epochs) {
                Some(run) => record
                    .samples
                    .iter()
                    .filter(|sample| run.contains(&sample.at))
                    .collect(),
                None => record.samples.iter().collect(),
            };
            report.device = (!in_run.is_empty()).then(|| summarize_samples(in_run));
            report.device_by_phase = summaries_by_phase(&record.samples, spans)
                .into_iter()
                .map(|(action, summary)| (action.name().to_owned(), summary))
                .collect();
            report.device_by_epoch = summaries_by_epoch(&record.samples, epochs);
        }
        report
    }

    /// Adds the verdict of the cached-batch test.
    pub fn with_diagnosis(mut self, diagnosis: Diagnosis) -> Self {
        self.diagnosis = Some(diagnosis);
        self
    }

    /// Adds the throughput window.
    pub fn with_throughput(mut self, throughput: ThroughputReport) -> Self {
        self.throughput = Some(throughput);
        self
    }

    /// Adds a batch-size search.
    pub fn with_batch_size(mut self, search: FinderReport) -> Self {
        self.batch_size = Some(search);
        self
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|source| crate::Error::Json {
            what: "the profile report".to_owned(),
            source,
        })
    }

    /// Writes the report as JSON to `path` (atomically).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let json = self.to_json()? + "\n";
        let synced = kiln_ml_core::Durability::Synced;
        Ok(kiln_ml_core::write_atomic(path, json.as_bytes(), synced)?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::phase::Action;

    fn phases() -> PhaseReport {
        PhaseTimer::new(crate::Clock::start(), crate::TimingMode::Accurate).report()
    }

    #[test]
    fn the_device_summary_covers_the_run_only() {
        let ms = Duration::from_millis;
        let sample = |at, busy| DeviceSample {
            at: ms(at),
            gpu_utilization_percent: Some(busy),
            ..DeviceSample::default()
        };
        // The monitor started before the run and stopped after it.
        let record = MonitorRecord {
            samples: vec![sample(0, 0.0), sample(15, 100.0), sample(30, 0.0)],
            sources: Vec::new(),
        };
        let spans = [Span {
            action: Action::Forward,
            step: 1,
            start: ms(10),
            duration: ms(10),
            sync: None,
        }];
        let epochs = [EpochBounds {
            epoch: 0,
            start: ms(10),
            end: Some(ms(20)),
        }];
        let report = ProfileReport::from_timeline(phases(), &spans, &epochs, Some(&record));
        let device = report.device.unwrap();
        assert_eq!(device.samples, 1);
        assert_eq!(device.get("gpu_utilization_percent").unwrap().mean, 100.0);
        // Without spans or epochs there are no bounds: every sample counts.
        let unbounded = ProfileReport::from_timeline(phases(), &[], &[], Some(&record));
        assert_eq!(unbounded.device.unwrap().samples, 3);
    }
}
