//! Finds the loader's worker count and prefetch depth by measuring them.
//!
//! [`LoaderTuner`] sweeps worker counts 0, 1, 2, 4, … up to the machine's cores (the core count
//! itself included) and a few prefetch depths (2, 4, 8 by default), timing one run of the
//! caller's loader per setting, and recommends the cheapest setting within 5% of the fastest
//! ([`recommend`]). It knows nothing of kiln-ml-data: the caller's closure builds a loader with
//! the setting, reads a fixed amount and returns how many samples it read.

mod tuning;

use std::fmt::Display;
use std::time::Instant;

pub use tuning::{LoaderMeasurement, LoaderSetting, LoaderTuning, best_loader_setting};

use crate::{Error, Result};

/// Measures a loader's throughput across worker counts and prefetch depths.
///
/// ```
/// use kiln_ml_profile::{LoaderSetting, LoaderTuner};
///
/// let tuner = LoaderTuner::new()
///     .with_worker_counts([1, 2])?
///     .with_prefetch_depths([2])?;
/// let tuning = tuner.run(|setting: LoaderSetting| {
///     // Build the loader with `setting.workers` and `setting.prefetch`, read a fixed number
///     // of batches, and return the samples read.
///     Ok::<u64, std::io::Error>(64 * setting.workers as u64)
/// })?;
/// assert_eq!(tuning.measurements.len(), 2);
/// println!("{}", tuning.table());
/// # Ok::<(), kiln_ml_profile::Error>(())
/// ```
///
/// kiln-ml-data's `Loader` needs at least one worker: start its sweep at 1
/// (`with_worker_counts(LoaderTuner::worker_counts_up_to(cores).into_iter().skip(1))`). Its
/// own prefetch depth (`Loader::prefetch_batches`, up to 256 batches for small ones) is not
/// among the default depths: add it with
/// [`with_prefetch_depths`](Self::with_prefetch_depths) to learn whether tuning beats it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderTuner {
    worker_counts: Vec<usize>,
    prefetch_depths: Vec<usize>,
    warmup_runs: usize,
    tolerance: f64,
}

impl LoaderTuner {
    /// The default prefetch depths, in batches.
    pub const DEFAULT_PREFETCH_DEPTHS: [usize; 3] = [2, 4, 8];
    /// The default tolerance: within 5% of the best.
    pub const DEFAULT_TOLERANCE: f64 = 0.05;

    /// Worker counts up to this machine's cores ([`worker_counts_up_to`](Self::worker_counts_up_to)
    /// of `available_parallelism`, 1 when unknown), prefetch depths 2, 4 and 8, no warm-up run,
    /// 5% tolerance.
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        Self {
            worker_counts: Self::worker_counts_up_to(cores),
            prefetch_depths: Self::DEFAULT_PREFETCH_DEPTHS.to_vec(),
            warmup_runs: 0,
            tolerance: Self::DEFAULT_TOLERANCE,
        }
    }

    /// 0, 1, 2, 4, … up to `cores`, and `cores` itself when it is not a power of two
    /// (6 cores: 0, 1, 2, 4, 6).
    pub fn worker_counts_up_to(cores: usize) -> Vec<usize> {
        let mut counts = vec![0];
        let mut workers = 1;
        while workers <= cores {
            counts.push(workers);
            workers = match workers.checked_mul(2) {
                Some(next) => next,
                None => break,
            };
        }
        if counts.last() != Some(&cores) {
            counts.push(cores);
        }
        counts
    }

    /// The worker counts to try, swept in ascending order (duplicates dropped); at least one.
    pub fn with_worker_counts(mut self, counts: impl IntoIterator<Item = usize>) -> Result<Self> {
        self.worker_counts = sorted_unique(counts, "loader tuner worker counts")?;
        Ok(self)
    }

    /// The prefetch depths to try, in batches, swept in ascending order (duplicates dropped);
    /// at least one.
    pub fn with_prefetch_depths(mut self, depths: impl IntoIterator<Item = usize>) -> Result<Self> {
        self.prefetch_depths = sorted_unique(depths, "loader tuner prefetch depths")?;
        Ok(self)
    }

    /// Untimed runs before the timed one, for every setting (to warm the page cache or a
    /// preprocessing cache); 0 by default.
    pub fn with_warmup_runs(mut self, runs: usize) -> Self {
        self.warmup_runs = runs;
        self
    }

    /// How far below the best throughput the recommendation may be, as a fraction in `0..1`
    /// (0.05: 5%); see [`best_loader_setting`](crate::best_loader_setting).
    pub fn with_tolerance(mut self, tolerance: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&tolerance) {
            return Err(Error::InvalidSetting {
                setting: "loader tuner tolerance",
                message: format!("{tolerance}; it must be a fraction in 0..1 (0.05 for 5%)"),
            });
        }
        self.tolerance = tolerance;
        Ok(self)
    }

    /// Every setting the sweep visits, in order: worker counts outer, prefetch depths inner.
    ///
    /// Zero workers means reading on the consumer's thread (PyTorch's `num_workers=0`), where
    /// nothing is prefetched: it is measured once, with prefetch 0.
    pub fn settings(&self) -> Vec<LoaderSetting> {
        self.worker_counts
            .iter()
            .flat_map(|&workers| {
                let depths = if workers == 0 {
                    vec![0]
                } else {
                    self.prefetch_depths.clone()
                };
                depths
                    .into_iter()
                    .map(move |prefetch| LoaderSetting { workers, prefetch })
            })
            .collect()
    }

    /// Runs `read` for every setting (after the warm-up runs), timing each call, and
    /// recommends one. `read` builds a loader with the setting, reads a fixed amount and
    /// returns the samples it read; the time includes building the loader, as a training run
    /// pays it too. The first error stops the sweep.
    pub fn run<E, F>(&self, mut read: F) -> Result<LoaderTuning>
    where
        E: Display,
        F: FnMut(LoaderSetting) -> Result<u64, E>,
    {
        let mut measurements = Vec::new();
        for setting in self.settings() {
            let failed = |error: E| Error::Run {
                during: format!(
                    "loader setting workers={} prefetch={}",
                    setting.workers, setting.prefetch
                ),
                message: error.to_string(),
            };
            for _ in 0..self.warmup_runs {
                read(setting).map_err(failed)?;
            }
            let started = Instant::now();
            let samples = read(setting).map_err(failed)?;
            // A run too fast for the clock still gets a finite rate.
            let seconds = started.elapsed().as_secs_f64().max(1e-9);
            measurements.push(LoaderMeasurement {
                workers: setting.workers,
                prefetch: setting.prefetch,
                samples,
                seconds,
                samples_per_s: samples as f64 / seconds,
            });
        }
        let (Some(best), Some(recommended)) = (
            tuning::fastest(&measurements),
            best_loader_setting(&measurements, self.tolerance),
        ) else {
            return Err(Error::InvalidSetting {
                setting: "loader tuner",
                message: "no setting was measured".into(),
            });
        };
        Ok(LoaderTuning {
            measurements,
            best,
            recommended,
            tolerance: self.tolerance,
        })
    }
}

impl Default for LoaderTuner {
    fn default() -> Self {
        Self::new()
    }
}

fn sorted_unique(
    values: impl IntoIterator<Item = usize>,
    setting: &'static str,
) -> Result<Vec<usize>> {
    let mut values: Vec<usize> = values.into_iter().collect();
    values.sort_unstable();
    values.dedup();
    if values.is_empty() {
        return Err(Error::InvalidSetting {
            setting,
            message: "none given; the sweep needs at least one".into(),
        });
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counts_are_powers_of_two_and_the_core_count() {
        assert_eq!(LoaderTuner::worker_counts_up_to(0), [0]);
        assert_eq!(LoaderTuner::worker_counts_up_to(1), [0, 1]);
        assert_eq!(LoaderTuner::worker_counts_up_to(2), [0, 1, 2]);
        assert_eq!(LoaderTuner::worker_counts_up_to(6), [0, 1, 2, 4, 6]);
        assert_eq!(LoaderTuner::worker_counts_up_to(8), [0, 1, 2, 4, 8]);
        assert_eq!(LoaderTuner::worker_counts_up_to(12), [0, 1, 2, 4, 8, 12]);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let tuner = LoaderTuner::new();
        assert_eq!(tuner.worker_counts, LoaderTuner::worker_counts_up_to(cores));
        assert_eq!(tuner.prefetch_depths, [2, 4, 8]);
    }

    #[test]
    fn sweep_visits_every_setting_once_in_order() {
        let tuner = LoaderTuner::new()
            .with_worker_counts([2, 0, 1, 2])
            .unwrap()
            .with_prefetch_depths([4, 2])
            .unwrap();
        let mut visited = Vec::new();
        let tuning = tuner
            .run(|setting| {
                visited.push(setting);
                Ok::<_, String>(10)
            })
            .unwrap();
        // Zero workers read on the consumer's thread: one run, nothing prefetched.
        let expected: Vec<LoaderSetting> = [(0, 0), (1, 2), (1, 4), (2, 2), (2, 4)]
            .into_iter()
            .map(|(workers, prefetch)| LoaderSetting { workers, prefetch })
            .collect();
        assert_eq!(visited, expected);
        assert_eq!(tuner.settings(), expected);
        let measured: Vec<LoaderSetting> = tuning
            .measurements
            .iter()
            .map(LoaderMeasurement::setting)
            .collect();
        assert_eq!(measured, expected);
        assert!(
            tuning
                .measurements
                .iter()
                .all(|m| m.samples == 10 && m.seconds > 0.0)
        );
        assert!(
            tuning
                .measurements
                .iter()
                .all(|m| m.samples_per_s.is_finite())
        );
        assert_eq!(tuning.tolerance, 0.05);
    }

    #[test]
    fn warmup_runs_come_before_each_timed_run() {
        let tuner = LoaderTuner::new()
            .with_worker_counts([1, 2])
            .unwrap()
            .with_prefetch_depths([2])
            .unwrap()
            .with_warmup_runs(2);
        let mut calls = Vec::new();
        tuner
            .run(|setting| {
                calls.push(setting.workers);
                Ok::<_, String>(1)
            })
            .unwrap();
        assert_eq!(calls, [1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn closure_errors_name_the_setting() {
        let tuner = LoaderTuner::new()
            .with_worker_counts([0, 1, 2])
            .unwrap()
            .with_prefetch_depths([2, 4])
            .unwrap();
        let mut calls = 0;
        let error = tuner
            .run(|setting| {
                calls += 1;
                if setting.workers == 1 && setting.prefetch == 4 {
                    Err("worker pool failed to start")
                } else {
                    Ok(5)
                }
            })
            .unwrap_err();
        assert_eq!(calls, 3, "the sweep stops at the first error");
        match error {
            Error::Run { during, message } => {
                assert_eq!(during, "loader setting workers=1 prefetch=4");
                assert_eq!(message, "worker pool failed to start");
            }
            other => panic!("unexpected error: {other}"),
        }
    }

    #[test]
    fn bad_settings_are_rejected() {
        assert!(LoaderTuner::new().with_worker_counts([]).is_err());
        assert!(LoaderTuner::new().with_prefetch_depths(Vec::new()).is_err());
        for tolerance in [-0.1, 1.0, f64::NAN] {
            assert!(
                LoaderTuner::new().with_tolerance(tolerance).is_err(),
                "{tolerance}"
            );
        }
        assert!(LoaderTuner::new().with_tolerance(0.0).is_ok());
    }
}
