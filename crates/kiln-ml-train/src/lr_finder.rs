//! The learning-rate range test (Lightning's `lr_find`, after Smith 2015): an exponential
//! sweep of the learning rate over a few hundred steps on a copy of the model, and the rate at
//! the steepest descent of the smoothed loss.

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::{AutodiffBackend, Backend};

use kiln_ml_core::StepOutcome;

use crate::{Error, Result, TrainStep, Trainer, TrainerConfig};

/// The range test's settings; the defaults are Lightning's (`min_lr` 1e-8, `max_lr` 1, 100
/// steps, divergence at 4x the best smoothed loss, smoothing 0.98, 10 steps skipped at the
/// start and 1 at the end of the suggestion's search).
///
/// ```no_run
/// # use burn::backend::{Autodiff, Flex};
/// # fn demo<M, O, I>(model: M, optim: O, batches: I) -> kiln_ml_train::Result<()>
/// # where
/// #     M: burn::module::AutodiffModule<Autodiff<Flex>> + kiln_ml_train::TrainStep<Autodiff<Flex>>,
/// #     O: burn::optim::Optimizer<M, Autodiff<Flex>>,
/// #     I: IntoIterator<Item = Result<M::Input, std::io::Error>>,
/// # {
/// use kiln_ml_train::{LrFinder, TrainerConfig};
///
/// // Trains a copy: `model` is left as it is.
/// let finding = LrFinder::default().run(model.clone(), optim, TrainerConfig::new(), Default::default(), batches)?;
/// println!("suggested learning rate: {:?}", finding.suggestion);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LrFinder {
    /// The first learning rate of the sweep.
    pub min_lr: f64,
    /// The last learning rate of the sweep.
    pub max_lr: f64,
    /// Optimizer steps of the sweep.
    pub steps: usize,
    /// Stop once the smoothed loss exceeds this many times the best one (0 never stops).
    pub divergence: f64,
    /// The exponential smoothing of the loss (Lightning's `beta`).
    pub smoothing: f64,
    /// Steps left out at the start of the suggestion's search.
    pub skip_begin: usize,
    /// Steps left out at the end of the suggestion's search.
    pub skip_end: usize,
}

impl Default for LrFinder {
    fn default() -> Self {
        Self {
            min_lr: 1e-8,
            max_lr: 1.0,
            steps: 100,
            divergence: 4.0,
            smoothing: 0.98,
            skip_begin: 10,
            skip_end: 1,
        }
    }
}

/// What a range test found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LrFinding {
    /// The learning rate of each step run.
    pub learning_rates: Vec<f64>,
    /// The loss each step read back.
    pub losses: Vec<f64>,
    /// The smoothed losses (bias-corrected exponential average).
    pub smoothed: Vec<f64>,
    /// The learning rate at the steepest descent of the smoothed loss; `None` when too few
    /// steps ran.
    pub suggestion: Option<f64>,
    /// Whether the sweep stopped early because the loss diverged.
    pub diverged: bool,
}

impl LrFinder {
    /// Skipped steps in a row after which a range test counts as diverged (see
    /// [`run`](Self::run)).
    pub const MAX_SKIPS_IN_A_ROW: usize = 64;

    /// With `steps` sweep steps between `min_lr` and `max_lr`.
    pub fn new(min_lr: f64, max_lr: f64, steps: usize) -> Self {
        Self {
            min_lr,
            max_lr,
            steps,
            ..Self::default()
        }
    }

    /// Runs the sweep on `model` with a fresh `optim`, under `config` (its precision, clipping
    /// and accumulation; it reads the loss back every step and writes no checkpoint), over at
    /// most `steps` optimizer steps of `batches`.
    ///
    /// Pass `model.clone()` to keep yours as it is: the sweep trains an
    /// [`independent_copy`](crate::independent_copy), so not even the running statistics that
    /// a Burn clone shares (`BatchNorm`'s) change. [`materialize`](crate::materialize) a model
    /// just built first: a clone of parameters not yet drawn draws its own, which also moves
    /// what yours draw after it.
    ///
    /// A step the trainer skips for non-finite gradients (under f16-mixed, while the loss scale
    /// calibrates) changes neither the weights nor the rate, so it is not a sweep step: it is
    /// left out of the finding, and the sweep goes on with the next batch. A skipped step whose
    /// loss itself is not finite ends the sweep as diverged, and so do
    /// [`MAX_SKIPS_IN_A_ROW`](Self::MAX_SKIPS_IN_A_ROW) skipped steps in a row (the scale has
    /// then backed off by 2^-64: the gradients are not finite at any scale).
    pub fn run<B, M, O, I, E>(
        &self,
        model: M,
        optim: O,
        config: TrainerConfig,
        device: B::Device,
        batches: I,
    ) -> Result<LrFinding>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B> + TrainStep<B>,
        O: Optimizer<M, B>,
        I: IntoIterator<Item = std::result::Result<M::Input, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        if !(self.min_lr > 0.0 && self.max_lr > self.min_lr && self.steps >= 2) {
            return Err(Error::InvalidConfig {
                field: "lr_finder",
                value: format!(
                    "min_lr {}, max_lr {}, steps {}",
                    self.min_lr, self.max_lr, self.steps
                ),
                reason: "needs 0 < min_lr < max_lr and at least 2 steps".into(),
            });
        }
        let config = config
            .with_read_loss_every(1)
            .with_checkpoint(None)
            .with_num_epochs(1);
        let sweep = ExponentialSweep::new(self.min_lr, self.max_lr, self.steps);
        // A clone shares running statistics with the caller's model; the sweep, which ends
        // diverging, must not write its statistics there.
        let model = crate::independent_copy(&model);
        let mut trainer = Trainer::new(model, optim, sweep, config, device)?;
        let mut finding = LrFinding {
            learning_rates: Vec::new(),
            losses: Vec::new(),
            smoothed: Vec::new(),
            suggestion: None,
            diverged: false,
        };
        let mut smoother = Smoother::new(self.smoothing, self.divergence);
        let mut skips_in_a_row = 0;
        for (index, batch) in batches.into_iter().enumerate() {
            let batch = batch.map_err(|error| Error::Data {
                epoch: 0,
                batch: index as u64,
                source: Box::new(error),
            })?;
            let Some(report) = trainer.train_batch(batch)?.step else {
                continue;
            };
            let Some(loss) = report.loss else { continue };
            if matches!(report.outcome, StepOutcome::Skipped(_)) && loss.is_finite() {
                skips_in_a_row += 1;
                if skips_in_a_row >= Self::MAX_SKIPS_IN_A_ROW {
                    finding.diverged = true;
                    break;
                }
                continue;
            }
            skips_in_a_row = 0;
            let (smoothed, diverged) = smoother.push(loss);
            finding.learning_rates.push(report.learning_rate);
            finding.losses.push(loss);
            finding.smoothed.push(smoothed);
            if diverged {
                finding.diverged = true;
                break;
            }
            if finding.losses.len() >= self.steps {
                break;
            }
        }
        finding.suggestion = steepest_descent(&finding.smoothed, self.skip_begin, self.skip_end)
            .map(|index| finding.learning_rates[index]);
        Ok(finding)
    }
}

/// The smoothed loss of the sweep and its divergence rule: an exponential moving average
/// debiased by `1 - smoothing^n` at the n-th point (fastai's `SmoothenValue`), and a stop when a
/// smoothed loss from the second point on exceeds `divergence` times the best before it
/// (Lightning's `early_stop_threshold`, checked from its second point) or is not finite.
struct Smoother {
    smoothing: f64,
    divergence: f64,
    average: f64,
    best: f64,
    points: i32,
}

impl Smoother {
    fn new(smoothing: f64, divergence: f64) -> Self {
        Self {
            smoothing,
            divergence,
            average: 0.0,
            best: f64::INFINITY,
            points: 0,
        }
    }

    /// Adds a loss; returns its smoothed value and whether the sweep diverged there.
    fn push(&mut self, loss: f64) -> (f64, bool) {
        self.points += 1;
        self.average = self.smoothing * self.average + (1.0 - self.smoothing) * loss;
        let smoothed = self.average / (1.0 - self.smoothing.powi(self.points));
        let diverged = !smoothed.is_finite()
            || (self.points > 1 && self.divergence > 0.0 && smoothed > self.divergence * self.best);
        self.best = self.best.min(smoothed);
        (smoothed, diverged)
    }
}

/// The index of the steepest fall of `losses` (the least `np.gradient`: central differences
/// inside, one-sided at the ends), searched between `skip_begin` and `len - skip_end`, as
/// Lightning's `suggestion` does.
pub(crate) fn steepest_descent(
    losses: &[f64],
    skip_begin: usize,
    skip_end: usize,
) -> Option<usize> {
    let end = losses.len().checked_sub(skip_end)?;
    let window: Vec<(usize, f64)> = (skip_begin..end)
        .map(|index| (index, losses[index]))
        .filter(|(_, loss)| loss.is_finite())
        .collect();
    if window.len() < 2 {
        return None;
    }
    let last = window.len() - 1;
    let gradient = |i: usize| match i {
        0 => window[1].1 - window[0].1,
        i if i == last => window[last].1 - window[last - 1].1,
        i => (window[i + 1].1 - window[i - 1].1) / 2.0,
    };
    (0..window.len())
        .min_by(|&a, &b| gradient(a).total_cmp(&gradient(b)))
        .map(|i| window[i].0)
}

/// The sweep's learning rates: `min * (max / min)^(i / (steps - 1))` for step i, then `max`.
#[derive(Debug, Clone, Copy)]
struct ExponentialSweep {
    min: f64,
    max: f64,
    steps: usize,
    next: usize,
}

impl ExponentialSweep {
    fn new(min: f64, max: f64, steps: usize) -> Self {
        Self {
            min,
            max,
            steps,
            next: 0,
        }
    }
}

impl LrScheduler for ExponentialSweep {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> f64 {
        let fraction = (self.next as f64 / (self.steps - 1) as f64).min(1.0);
        self.next += 1;
        self.min * (self.max / self.min).powf(fraction)
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.next
    }

    fn load_record<B: Backend>(mut self, record: usize) -> Self {
        self.next = record;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_is_checked_from_the_second_point_against_the_best_before() {
        // Smoothed 1.0, then 5.55 > 4 x 1.0: Lightning stops at its second point. (kiln took the
        // second point as its best and went on into the divergent range.)
        let mut smoother = Smoother::new(0.98, 4.0);
        assert_eq!(smoother.push(1.0), (1.0, false));
        let (smoothed, diverged) = smoother.push(10.0);
        assert!((smoothed - 0.2196 / 0.0396).abs() < 1e-9, "{smoothed}");
        assert!(diverged);
        // A falling loss never diverges; divergence 0 turns the rule off; NaN always stops.
        let mut falling = Smoother::new(0.98, 4.0);
        assert!((0..50).all(|point| !falling.push(10.0 - point as f64 * 0.1).1));
        let mut off = Smoother::new(0.98, 0.0);
        assert!(!off.push(1.0).1 && !off.push(1000.0).1);
        assert!(Smoother::new(0.98, 4.0).push(f64::NAN).1);
    }

    #[test]
    fn the_sweep_runs_from_min_to_max_exponentially() {
        let mut sweep = ExponentialSweep::new(1e-6, 1.0, 7);
        let rates: Vec<f64> = (0..8).map(|_| sweep.step()).collect();
        for (rate, want) in rates
            .iter()
            .zip([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 1.0])
        {
            assert!((rate / want - 1.0).abs() < 1e-9, "{rates:?}");
        }
    }

    #[test]
    fn the_suggestion_is_the_steepest_fall_of_the_smoothed_loss() {
        // Flat, then falling fastest between indices 5 and 7, then rising.
        let losses = [5.0, 5.0, 5.0, 5.0, 4.9, 4.0, 2.5, 1.5, 1.3, 1.4, 3.0];
        assert_eq!(steepest_descent(&losses, 0, 1), Some(6));
        // Lightning's skips: the first `skip_begin` and last `skip_end` points are not searched.
        assert_eq!(steepest_descent(&losses, 7, 1), Some(7));
        assert_eq!(steepest_descent(&[1.0, 0.5], 1, 1), None);
        // Non-finite losses are left out (Lightning's `isfinite` filter): the fall from 1.0 to
        // 0.5 is then the steepest.
        assert_eq!(steepest_descent(&[1.0, f64::NAN, 0.5, 0.2], 0, 0), Some(0));
    }
}
