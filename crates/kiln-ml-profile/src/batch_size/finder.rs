//! `BatchSizeFinder`: the settings, the trial loop and its report.

use std::fmt::Display;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::child::{ChildCommand, run_in_child};
use super::search::{FinderMode, Next, Search};
use super::trial::{Trial, run_in_process, timed};
use crate::{Error, MemoryProbe, Result};

/// Finds the largest batch size whose training steps fit in memory.
///
/// Each trial runs `steps_per_trial` full training steps (forward, backward and the optimizer
/// step, so the optimizer's state is allocated too) through a closure given the batch size
/// and the number of steps. A trial is out of memory when the closure returns an error or
/// panics with an out-of-memory message (Burn, CubeCL, CUDA, Rust's allocator), or when the
/// [memory probe](MemoryProbe)'s peak exceeds the [budget](Self::budget_bytes): that is how the
/// finder works, and is tested, on a software Vulkan device or the CPU. Any other failure stops
/// the search with [`Error::Run`]. The pool is cleaned between trials.
///
/// Defaults follow Lightning's `Tuner.scale_batch_size` (start 2, 3 steps per trial, at most
/// 25 trials, 5% margin in `binsearch`, at most 8192, never above the dataset size) and
/// Accelerate's `find_executable_batch_size` for [`FinderMode::Shrink`] (start 128, factor 0.9).
///
/// State: [`run`](Self::run) leaves the caller's state alone when the closure builds its own
/// model and optimizer (Accelerate's rule: everything that holds device memory is created
/// inside); [`run_restoring`](Self::run_restoring) runs trials on a clone of the caller's state
/// and restores it after each one. With [`child_process`](Self::child_process) every trial runs
/// in a fresh process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchSizeFinder {
    /// How the size moves between trials.
    pub mode: FinderMode,
    /// The first size tried (2; 128 for `shrink`).
    pub start: usize,
    /// Training steps per trial (3).
    pub steps_per_trial: usize,
    /// At most this many trials (25; successful trials in `binsearch`, as in Lightning). In
    /// `shrink` every trial but the last fails, so the smallest size it reaches is
    /// `start × shrink_factor^(max_trials − 1)`: raise it for a large start.
    pub max_trials: usize,
    /// `binsearch` answers `floor(size × (1 − margin))` (0.05).
    pub margin: f64,
    /// Never tries more than this (8192).
    pub max_size: usize,
    /// Never tries more than the dataset has samples (unset: no limit besides `max_size`).
    pub dataset_size: Option<usize>,
    /// `shrink` multiplies the size by this after an out-of-memory trial (0.9).
    pub shrink_factor: f64,
    /// A trial whose peak memory exceeds this many bytes counts as out of memory.
    pub budget_bytes: Option<u64>,
    #[serde(skip)]
    probe: Option<Arc<dyn MemoryProbe>>,
    #[serde(skip)]
    child: Option<ChildCommand>,
    #[serde(skip)]
    on_trial: Option<OnTrial>,
}

/// What [`BatchSizeFinder::on_trial`] calls with each trial as it ends.
#[derive(Clone)]
struct OnTrial(Arc<dyn Fn(&Trial) + Send + Sync>);

impl std::fmt::Debug for OnTrial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnTrial(..)")
    }
}

/// What a search found, with every trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinderReport {
    /// The mode used.
    pub mode: FinderMode,
    /// The answer: the largest size that fitted, less the margin in `binsearch`.
    pub found: usize,
    /// The largest size that fitted, before the margin.
    pub largest_fitting: usize,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
    /// The margin applied.
    pub margin: f64,
    /// The memory budget, when one was set.
    pub budget_bytes: Option<u64>,
    /// The memory probe's name, when one was set.
    pub probe: Option<String>,
    /// Whether trials ran in child processes.
    pub child_process: bool,
}

impl Default for BatchSizeFinder {
    fn default() -> Self {
        Self::new(FinderMode::BinSearch)
    }
}

impl BatchSizeFinder {
    /// A finder with the defaults of `mode`.
    pub fn new(mode: FinderMode) -> Self {
        Self {
            mode,
            start: if mode == FinderMode::Shrink { 128 } else { 2 },
            steps_per_trial: 3,
            max_trials: 25,
            margin: 0.05,
            max_size: 8192,
            dataset_size: None,
            shrink_factor: 0.9,
            budget_bytes: None,
            probe: None,
            child: None,
            on_trial: None,
        }
    }

    /// Starts at `start`.
    pub fn start(mut self, start: usize) -> Self {
        self.start = start;
        self
    }

    /// Runs `steps` steps per trial.
    pub fn steps_per_trial(mut self, steps: usize) -> Self {
        self.steps_per_trial = steps;
        self
    }

    /// Runs at most `trials` trials.
    pub fn max_trials(mut self, trials: usize) -> Self {
        self.max_trials = trials;
        self
    }

    /// Keeps `margin` (a fraction in [0, 1)) below the largest fitting size in `binsearch`.
    pub fn margin(mut self, margin: f64) -> Self {
        self.margin = margin;
        self
    }

    /// Never tries more than `max_size`.
    pub fn max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// Never tries more than the dataset's `samples`.
    pub fn dataset_size(mut self, samples: usize) -> Self {
        self.dataset_size = Some(samples);
        self
    }

    /// Multiplies by `factor` (in (0, 1)) after each out-of-memory trial in `shrink`.
    pub fn shrink_factor(mut self, factor: f64) -> Self {
        self.shrink_factor = factor;
        self
    }

    /// Reads each trial's peak memory from `probe` and cleans its pool between trials.
    pub fn probe(mut self, probe: Arc<dyn MemoryProbe>) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Counts a trial whose peak exceeds `bytes` (read from the probe) as out of memory.
    pub fn budget_bytes(mut self, bytes: u64) -> Self {
        self.budget_bytes = Some(bytes);
        self
    }

    /// Runs every trial in a child process started with `command` (see
    /// [`serve_child_trial`](super::serve_child_trial)); the child measures its own memory and
    /// judges the budget.
    pub fn child_process(mut self, command: ChildCommand) -> Self {
        self.child = Some(command);
        self
    }

    fn validate(&self) -> Result<()> {
        let invalid = |setting, message: String| Err(Error::InvalidSetting { setting, message });
        if self.start == 0 {
            return invalid(
                "start",
                "the first batch size must be at least 1".to_owned(),
            );
        }
        if self.steps_per_trial == 0 {
            return invalid(
                "steps_per_trial",
                "a trial needs at least one step".to_owned(),
            );
        }
        if self.max_trials == 0 {
            return invalid("max_trials", "at least one trial is needed".to_owned());
        }
        if !(0.0..1.0).contains(&self.margin) {
            return invalid("margin", format!("{} is not in [0, 1)", self.margin));
        }
        if self.max_size == 0 {
            return invalid("max_size", "the size limit must be at least 1".to_owned());
        }
        if self.dataset_size == Some(0) {
            return invalid(
                "dataset_size",
                "the dataset has no sample to batch".to_owned(),
            );
        }
        if !(self.shrink_factor > 0.0 && self.shrink_factor < 1.0) {
            return invalid(
                "shrink_factor",
                format!("{} is not in (0, 1)", self.shrink_factor),
            );
        }
        if self.budget_bytes.is_some() && self.probe.is_none() && self.child.is_none() {
            return invalid(
                "budget_bytes",
                "a budget needs a memory probe to read the peak from".to_owned(),
            );
        }
        Ok(())
    }

    /// Calls `report` with each trial as it ends (of [`run`](Self::run), its variants and
    /// [`try_size`](Self::try_size)): progress for a search whose trials take seconds to
    /// minutes each, as Lightning's tuner prints each one.
    pub fn on_trial(mut self, report: impl Fn(&Trial) + Send + Sync + 'static) -> Self {
        self.on_trial = Some(OnTrial(Arc::new(report)));
        self
    }

    /// Searches, running each trial through `trial(batch_size, steps)`, which must run that
    /// many full training steps at that batch size (and sync the device, so failures surface
    /// inside the trial). In child mode this process only starts children; `trial` is what
    /// each child runs through [`serve_child_trial`](super::serve_child_trial).
    pub fn run<E: Display>(
        &self,
        mut trial: impl FnMut(usize, usize) -> std::result::Result<(), E>,
    ) -> Result<FinderReport> {
        self.validate()?;
        let cap = self
            .dataset_size
            .map_or(self.max_size, |samples| samples.min(self.max_size));
        let mut search = Search::new(self.mode, cap, self.max_trials, self.shrink_factor);
        let mut size = search.first(self.start);
        let mut trials = Vec::new();
        let largest = loop {
            let done = self.one_trial(size, &mut trial)?;
            let fits = done.fits;
            trials.push(done);
            match search.record(size, fits) {
                Next::Try(next) => size = next,
                Next::Done(largest) => break largest,
            }
        };
        let Some(largest_fitting) = largest else {
            let smallest_tried = trials.iter().map(|trial| trial.batch_size).min();
            if smallest_tried.is_some_and(|smallest| smallest > 1) {
                return Err(Error::TrialsExhausted {
                    trials: trials.len(),
                    smallest: smallest_tried.unwrap_or(1),
                });
            }
            return Err(Error::NothingFits {
                smallest: trials
                    .iter()
                    .map(|trial| trial.batch_size)
                    .min()
                    .unwrap_or(1),
                reason: trials
                    .last()
                    .and_then(|trial| trial.reason.clone())
                    .unwrap_or_default(),
            });
        };
        let found = match self.mode {
            FinderMode::BinSearch => {
                ((largest_fitting as f64 * (1.0 - self.margin)).floor() as usize).max(1)
            }
            FinderMode::Power | FinderMode::Shrink => largest_fitting,
        };
        Ok(FinderReport {
            mode: self.mode,
            found,
            largest_fitting,
            trials,
            margin: if self.mode == FinderMode::BinSearch {
                self.margin
            } else {
                0.0
            },
            budget_bytes: self.budget_bytes,
            probe: self.probe.as_ref().map(|probe| probe.name().to_owned()),
            child_process: self.child.is_some(),
        })
    }

    /// Runs one trial at `batch_size`, as [`run`](Self::run) runs each of its trials (same
    /// steps, probe, budget and isolation): for checking a size, or finding a reference
    /// maximum by other means.
    pub fn try_size<E: Display>(
        &self,
        batch_size: usize,
        mut trial: impl FnMut(usize, usize) -> std::result::Result<(), E>,
    ) -> Result<Trial> {
        self.validate()?;
        self.one_trial(batch_size, &mut trial)
    }

    fn one_trial<E: Display>(
        &self,
        size: usize,
        trial: &mut dyn FnMut(usize, usize) -> std::result::Result<(), E>,
    ) -> Result<Trial> {
        let done = timed(size, || match &self.child {
            Some(command) => run_in_child(command, size, self.steps_per_trial, self.budget_bytes),
            None => Ok(run_in_process(
                trial,
                size,
                self.steps_per_trial,
                self.probe.as_deref(),
                self.budget_bytes,
            )),
        })?;
        log::info!(
            "batch size {size}: {}",
            if done.fits { "fits" } else { "out of memory" }
        );
        if let Some(OnTrial(report)) = &self.on_trial {
            report(&done);
        }
        Ok(done)
    }

    /// [`run`](Self::run) on a clone of `state` (a model and its optimizer, say): each trial
    /// gets a fresh clone, so whatever a trial did (parameters updated, optimizer state
    /// allocated) is gone afterwards and `state` is as it was. Burn modules and optimizers
    /// clone cheaply (their tensors are shared until written).
    pub fn run_restoring<S: Clone, E: Display>(
        &self,
        state: &S,
        mut trial: impl FnMut(S, usize, usize) -> std::result::Result<(), E>,
    ) -> Result<FinderReport> {
        self.run(|batch_size, steps| trial(state.clone(), batch_size, steps))
    }
}

#[cfg(test)]
mod tests;
