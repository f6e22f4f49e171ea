//! Input-bound or compute-bound? The cached-batch test: N steps on one batch kept on the
//! device, against N steps fed by the real loader ("if the throughput is the same with and
//! without data loading, I/O is not the bottleneck"), plus the data-wait share and the
//! device's utilization where NVML has it.

mod verdict;

use std::fmt::Display;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use verdict::{Diagnosis, RunMeasurement, Thresholds, Verdict, decide_bottleneck};

use crate::{Clock, Error, Result};

/// What one step of a run reports.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct StepRun {
    /// The step's loss, when it was read back.
    pub loss: Option<f64>,
    /// How long the step waited for its batch (zero for the cached batch).
    #[serde(with = "crate::serde_seconds")]
    pub data_wait: Duration,
}

/// The device's mean utilization (percent) between two offsets of the profile's clock.
type UtilizationSource<'a> = Box<dyn Fn(Duration, Duration) -> Option<f64> + 'a>;

/// Runs the cached-batch test and decides.
///
/// Each closure runs one full training step (forward, backward, optimizer) and must return only
/// after the device finished it (read the loss back, or sync), so wall time is device time.
/// Warm-up steps (autotune and compilation land there, and a loader's prefetched backlog
/// drains there: use more warm-up steps than the loader prefetches) are run and not measured.
pub struct Bottleneck<'a> {
    /// Steps run before measuring, per run (5).
    pub warmup_steps: usize,
    /// Steps measured, per run (20).
    pub measure_steps: usize,
    /// The rules' thresholds.
    pub thresholds: Thresholds,
    clock: Clock,
    utilization: Option<UtilizationSource<'a>>,
}

impl Default for Bottleneck<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Bottleneck<'a> {
    /// 5 warm-up and 20 measured steps per run, default thresholds, no utilization source.
    pub fn new() -> Self {
        Self {
            warmup_steps: 5,
            measure_steps: 20,
            thresholds: Thresholds::default(),
            clock: Clock::start(),
            utilization: None,
        }
    }

    /// Runs `warmup` unmeasured and `measure` measured steps per run.
    pub fn steps(mut self, warmup: usize, measure: usize) -> Self {
        self.warmup_steps = warmup;
        self.measure_steps = measure;
        self
    }

    /// Uses these thresholds.
    pub fn thresholds(mut self, thresholds: Thresholds) -> Self {
        self.thresholds = thresholds;
        self
    }

    /// Reads the device's utilization over each measured run from `source`, given offsets on
    /// `clock` (a [`DeviceMonitor`](crate::DeviceMonitor) on the same clock answers this).
    pub fn utilization(
        mut self,
        clock: Clock,
        source: impl Fn(Duration, Duration) -> Option<f64> + 'a,
    ) -> Self {
        self.clock = clock;
        self.utilization = Some(Box::new(source));
        self
    }

    /// Reads the device's utilization from `monitor`'s samples (NVML), on the monitor's clock.
    /// Without NVML the samples carry no utilization and the verdict says so.
    pub fn with_monitor(self, monitor: &'a crate::DeviceMonitor) -> Self {
        self.utilization(monitor.clock(), move |from, to| {
            let values: Vec<f64> = monitor
                .samples_so_far()
                .iter()
                .filter(|sample| from <= sample.at && sample.at <= to)
                .filter_map(|sample| sample.gpu_utilization_percent)
                .collect();
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        })
    }

    /// Measures `cached_step` (one batch kept on the device) then `real_step` (the loader),
    /// and decides.
    pub fn diagnose<E: Display>(
        &self,
        mut cached_step: impl FnMut() -> std::result::Result<StepRun, E>,
        mut real_step: impl FnMut() -> std::result::Result<StepRun, E>,
    ) -> Result<Diagnosis> {
        if self.measure_steps == 0 {
            return Err(Error::InvalidSetting {
                setting: "measure_steps",
                message: "at least one step must be measured".to_owned(),
            });
        }
        let cached = self.measure("the cached-batch run", &mut cached_step)?;
        let real = self.measure("the real-loader run", &mut real_step)?;
        Ok(decide_bottleneck(cached, real, self.thresholds))
    }

    fn measure<E: Display>(
        &self,
        during: &str,
        step: &mut dyn FnMut() -> std::result::Result<StepRun, E>,
    ) -> Result<RunMeasurement> {
        let failed = |error: E| Error::Run {
            during: during.to_owned(),
            message: error.to_string(),
        };
        for _ in 0..self.warmup_steps {
            step().map_err(failed)?;
        }
        let started = Instant::now();
        let from = self.clock.now();
        let mut wait = Duration::ZERO;
        let mut losses = Vec::new();
        for _ in 0..self.measure_steps {
            let run = step().map_err(failed)?;
            wait += run.data_wait;
            losses.extend(run.loss);
        }
        let seconds = started.elapsed().as_secs_f64();
        let to = self.clock.now();
        let gpu_utilization_percent = self.utilization.as_ref().and_then(|util| util(from, to));
        Ok(RunMeasurement {
            steps: self.measure_steps,
            seconds,
            steps_per_s: if seconds > 0.0 {
                self.measure_steps as f64 / seconds
            } else {
                0.0
            },
            data_wait_seconds: wait.as_secs_f64(),
            data_wait_share: if seconds > 0.0 {
                (wait.as_secs_f64() / seconds).min(1.0)
            } else {
                0.0
            },
            gpu_utilization_percent,
            losses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loader_slower_than_the_step_is_input_bound() {
        let step = Duration::from_millis(2);
        let mut loss = 2.0;
        let diagnosis = Bottleneck::new()
            .steps(1, 5)
            .diagnose(
                || {
                    std::thread::sleep(step);
                    loss *= 0.9;
                    Ok::<_, String>(StepRun {
                        loss: Some(loss),
                        data_wait: Duration::ZERO,
                    })
                },
                || {
                    // The batch takes four times the step to arrive.
                    let wait = step * 4;
                    std::thread::sleep(wait + step);
                    Ok(StepRun {
                        loss: None,
                        data_wait: wait,
                    })
                },
            )
            .unwrap();
        assert_eq!(diagnosis.verdict, Verdict::InputBound);
        assert_eq!(diagnosis.cached_loss_decreased, Some(true));
        assert_eq!(diagnosis.cached.losses.len(), 5);
    }

    #[test]
    fn a_failing_step_names_its_run() {
        let error = Bottleneck::new()
            .steps(0, 2)
            .diagnose(|| Ok(StepRun::default()), || Err("loader broke"))
            .unwrap_err();
        assert!(error.to_string().contains("real-loader run"), "{error}");
        assert!(error.to_string().contains("loader broke"), "{error}");
    }
}
