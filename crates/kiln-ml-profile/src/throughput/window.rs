//! `Throughput`: the rolling window over cumulative counters.

use std::collections::VecDeque;

use super::sample::{ThroughputReport, ThroughputSample};
use super::totals::Totals;
use crate::{Error, Result};

/// A rolling window of cumulative counters.
///
/// Rolling throughput and MFU from cumulative counters, after Lightning's `Throughput`
/// (`src/lightning/fabric/utilities/throughput.py`, itself from MosaicML Composer).
///
/// Call [`update`](Throughput::update) once per **optimizer step** with totals since the start: the
/// elapsed time, optimizer steps, micro-batches, samples, and optionally items (tokens) and
/// FLOPs. Rates are differences between the oldest and newest update of the window divided by
/// the time between them, so an accumulation window of K micro-batches counts as one step
/// (Lightning-AI/litgpt #403, Lightning #19461) and its micro-batches are reported on their own.
///
/// **Sync the device before reading the clock**: GPU backends queue work, and a clock read
/// without a sync measures how fast the host enqueued it (Lightning #4937, #8222). In Burn,
/// `B::sync(&device)` before `Clock::now`. Leave validation out of the elapsed time (pass the
/// training time only), or [`reset`](Throughput::reset) after it (Lightning #21291).
///
/// ```
/// use std::time::Duration;
/// use kiln_ml_profile::{Throughput, ThroughputSample};
///
/// let mut throughput = Throughput::new().with_window(3)?.with_peak_flops(1e12)?;
/// for step in 1..=3u64 {
///     // 4 micro-batches of 8 samples per optimizer step, 0.5 s per step.
///     throughput.update(ThroughputSample {
///         elapsed: Duration::from_millis(500 * step),
///         optimizer_steps: step,
///         micro_batches: 4 * step,
///         samples: 32 * step,
///         items: None,
///         flops: Some(2.5e11 * step as f64),
///     })?;
/// }
/// let report = throughput.compute().expect("the window is full");
/// assert_eq!(report.steps_per_s, 2.0);
/// assert_eq!(report.micro_batches_per_s, 8.0);
/// assert_eq!(report.samples_per_s, 64.0);
/// assert_eq!(report.mfu, Some(0.5));
/// # Ok::<(), kiln_ml_profile::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Throughput {
    window: VecDeque<ThroughputSample>,
    window_size: usize,
    report_before_full: bool,
    warmup_left: usize,
    peak_flops_per_s: Option<f64>,
    last: Option<Totals>,
}

impl Throughput {
    /// The default window: 100 updates, as Lightning's.
    pub const DEFAULT_WINDOW: usize = 100;

    /// A window of 100 updates that reports once full, no warm-up skipped, no peak.
    pub fn new() -> Self {
        Self {
            window: VecDeque::new(),
            window_size: Self::DEFAULT_WINDOW,
            report_before_full: false,
            warmup_left: 0,
            peak_flops_per_s: None,
            last: None,
        }
    }

    /// Keeps the newest `updates` updates (rates span `updates - 1` steps); at least 2.
    pub fn with_window(mut self, updates: usize) -> Result<Self> {
        if updates < 2 {
            return Err(Error::InvalidSetting {
                setting: "throughput window",
                message: format!("{updates} updates; rates need at least 2"),
            });
        }
        self.window_size = updates;
        Ok(self)
    }

    /// With `true`, [`compute`](Self::compute) reports as soon as the window holds 2 updates,
    /// over however many it holds. The default (`false`) waits for a full window, as Lightning
    /// does: early rates are noisy and the first steps after warm-up are still settling.
    pub fn report_before_full(mut self, report: bool) -> Self {
        self.report_before_full = report;
        self
    }

    /// Drops the first `updates` updates (autotuning and compilation land there): they are
    /// checked but not recorded, so the first rate starts at update `updates + 1`.
    pub fn skip_warmup(mut self, updates: usize) -> Self {
        self.warmup_left = updates;
        self
    }

    /// The device's peak FLOP/s for MFU, for the precision the matmuls run in (see
    /// [`peak_flops`](crate::peak_flops)); finite and positive.
    pub fn with_peak_flops(mut self, flops_per_s: f64) -> Result<Self> {
        if !(flops_per_s.is_finite() && flops_per_s > 0.0) {
            return Err(Error::InvalidSetting {
                setting: "peak FLOP/s",
                message: format!("{flops_per_s}; it must be finite and positive"),
            });
        }
        self.peak_flops_per_s = Some(flops_per_s);
        Ok(self)
    }

    /// Records the totals after an optimizer step. Fails, recording nothing, when a counter is
    /// below its previous value or FLOPs are not a finite, non-negative number.
    pub fn update(&mut self, sample: ThroughputSample) -> Result<()> {
        Totals::check(self.last.as_ref(), &sample)?;
        self.last = Some(Totals::after(self.last.as_ref(), &sample));
        if self.warmup_left > 0 {
            self.warmup_left -= 1;
            return Ok(());
        }
        self.window.push_back(sample);
        while self.window.len() > self.window_size {
            self.window.pop_front();
        }
        Ok(())
    }

    /// Rates over the window: `None` before it holds 2 updates, before it is full unless
    /// [`report_before_full`](Self::report_before_full), or while no time has passed across it.
    pub fn compute(&self) -> Option<ThroughputReport> {
        let needed = if self.report_before_full {
            2
        } else {
            self.window_size
        };
        if self.window.len() < needed.max(2) {
            return None;
        }
        let (first, last) = (self.window.front()?, self.window.back()?);
        let seconds = last.elapsed.checked_sub(first.elapsed)?.as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let rate = |from: u64, to: u64| to.saturating_sub(from) as f64 / seconds;
        let items_per_s = first.items.zip(last.items).map(|(from, to)| rate(from, to));
        let flops_per_s = first
            .flops
            .zip(last.flops)
            .map(|(from, to)| (to - from) / seconds);
        let mfu = flops_per_s
            .zip(self.peak_flops_per_s)
            .map(|(achieved, peak)| achieved / peak);
        Some(ThroughputReport {
            steps_per_s: rate(first.optimizer_steps, last.optimizer_steps),
            micro_batches_per_s: rate(first.micro_batches, last.micro_batches),
            samples_per_s: rate(first.samples, last.samples),
            items_per_s,
            flops_per_s,
            mfu,
            peak_flops_per_s: self.peak_flops_per_s,
            window_steps: last.optimizer_steps.saturating_sub(first.optimizer_steps),
            window_seconds: seconds,
        })
    }

    /// Empties the window and forgets the counters (for counters restarted from zero, or after
    /// validation); settings stay, warm-up is not skipped again.
    pub fn reset(&mut self) {
        self.window.clear();
        self.last = None;
    }

    /// Empties the window and starts it again at `sample`, which is no step of its own: unlike
    /// an [`update`](Self::update), it does not use up a warm-up update, and while warm-up
    /// updates are left it only sets the counters the next updates are checked against.
    pub(crate) fn restart_at(&mut self, sample: ThroughputSample) -> Result<()> {
        self.reset();
        Totals::check(None, &sample)?;
        self.last = Some(Totals::after(None, &sample));
        if self.warmup_left == 0 {
            self.window.push_back(sample);
        }
        Ok(())
    }
}

impl Default for Throughput {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Totals after `step` optimizer steps of `seconds_per_step`, 4 micro-batches of 8 samples
    /// of 16 tokens each, 1e9 FLOPs per step.
    fn at(step: u64, seconds_per_step: f64) -> ThroughputSample {
        ThroughputSample {
            elapsed: Duration::from_secs_f64(seconds_per_step * step as f64),
            optimizer_steps: step,
            micro_batches: 4 * step,
            samples: 32 * step,
            items: Some(512 * step),
            flops: Some(1e9 * step as f64),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn rates_count_an_accumulation_window_once() {
        let mut throughput = Throughput::new()
            .with_window(5)
            .unwrap()
            .with_peak_flops(4e9)
            .unwrap();
        for step in 1..=5 {
            throughput.update(at(step, 0.5)).unwrap();
        }
        let report = throughput.compute().unwrap();
        assert!(close(report.steps_per_s, 2.0));
        assert!(close(report.micro_batches_per_s, 8.0));
        assert!(close(report.samples_per_s, 64.0));
        assert!(close(report.items_per_s.unwrap(), 1024.0));
        assert!(close(report.flops_per_s.unwrap(), 2e9));
        assert!(close(report.mfu.unwrap(), 0.5));
        assert_eq!(report.peak_flops_per_s, Some(4e9));
        assert_eq!(report.window_steps, 4);
        assert!(close(report.window_seconds, 2.0));
    }

    #[test]
    fn reports_only_once_the_window_is_full_unless_asked() {
        let mut full = Throughput::new().with_window(4).unwrap();
        let mut early = Throughput::new()
            .with_window(4)
            .unwrap()
            .report_before_full(true);
        for step in 1..=4 {
            assert_eq!(full.compute(), None);
            assert_eq!(early.compute().is_some(), step > 2);
            full.update(at(step, 0.25)).unwrap();
            early.update(at(step, 0.25)).unwrap();
        }
        assert!(close(full.compute().unwrap().steps_per_s, 4.0));
        assert!(close(early.compute().unwrap().steps_per_s, 4.0));
        assert_eq!(Throughput::new().compute(), None);
    }

    #[test]
    fn the_window_slides_past_slow_steps() {
        let mut throughput = Throughput::new().with_window(3).unwrap();
        // Three slow steps (1 s), then three fast ones (0.1 s).
        let mut elapsed = Duration::ZERO;
        for step in 1..=6u64 {
            elapsed += Duration::from_millis(if step <= 3 { 1000 } else { 100 });
            throughput
                .update(ThroughputSample {
                    elapsed,
                    ..at(step, 0.0)
                })
                .unwrap();
        }
        let report = throughput.compute().unwrap();
        assert!(close(report.steps_per_s, 10.0));
        assert_eq!(report.window_steps, 2);
    }

    #[test]
    fn warmup_updates_are_dropped() {
        let mut throughput = Throughput::new().with_window(2).unwrap().skip_warmup(2);
        // Two warm-up steps of 10 s (autotuning), then steps of 0.5 s.
        let times = [10.0, 20.0, 20.5, 21.0];
        for (step, seconds) in (1..).zip(times) {
            throughput
                .update(ThroughputSample {
                    elapsed: Duration::from_secs_f64(seconds),
                    ..at(step, 0.0)
                })
                .unwrap();
            assert_eq!(throughput.compute().is_some(), step >= 4);
        }
        assert!(close(throughput.compute().unwrap().steps_per_s, 2.0));
    }

    #[test]
    fn equal_totals_and_reset_are_fine() {
        let mut throughput = Throughput::new().with_window(2).unwrap();
        throughput.update(at(1, 1.0)).unwrap();
        throughput.update(at(1, 1.0)).unwrap();
        // No time passed across the window: no rate rather than infinity.
        assert_eq!(throughput.compute(), None);
        throughput.reset();
        assert_eq!(throughput.compute(), None);
        throughput.update(at(0, 1.0)).unwrap();
        throughput.update(at(1, 1.0)).unwrap();
        assert!(close(throughput.compute().unwrap().steps_per_s, 1.0));
    }

    #[test]
    fn missing_items_flops_or_peak_give_none() {
        let mut throughput = Throughput::new().with_window(2).unwrap();
        throughput
            .update(ThroughputSample {
                items: None,
                ..at(1, 1.0)
            })
            .unwrap();
        throughput.update(at(2, 1.0)).unwrap();
        let report = throughput.compute().unwrap();
        assert_eq!(report.items_per_s, None);
        assert!(close(report.flops_per_s.unwrap(), 1e9));
        assert_eq!(report.mfu, None);
        assert_eq!(report.peak_flops_per_s, None);
    }

    #[test]
    fn bad_settings_and_flops_are_rejected() {
        assert!(Throughput::new().with_window(1).is_err());
        assert!(Throughput::new().with_peak_flops(0.0).is_err());
        assert!(Throughput::new().with_peak_flops(f64::NAN).is_err());
        let mut throughput = Throughput::new();
        throughput.update(at(1, 1.0)).unwrap();
        let nan = ThroughputSample {
            flops: Some(f64::NAN),
            ..at(5, 1.0)
        };
        assert!(throughput.update(nan).is_err());
        // A rejected update records nothing: step 2 does not go back from step 5.
        throughput.update(at(2, 1.0)).unwrap();
        // Warm-up updates are checked too.
        let mut warming = Throughput::new().skip_warmup(5);
        warming.update(at(2, 1.0)).unwrap();
        assert!(warming.update(at(1, 1.0)).is_err());
    }
}
