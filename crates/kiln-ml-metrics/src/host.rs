//! The host path: a batch of `f32` slices measured on the CPU, optionally on rayon's threads.

use rayon::prelude::*;

use crate::batch::TrajectoryBatch;
use crate::config::MetricsConfig;
use crate::input_checks::check_probability_row;
use crate::match_samples::{add_match_samples, prediction_bucket};
use crate::mode_errors::{BatchPlan, UnitErrors};
use crate::overlap::add_overlap;
use crate::selection::{accumulate_unit, rank_modes};
use crate::sums::MetricSums;
use crate::{Error, Result};

/// How the host path spreads a batch over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Parallelism {
    /// One thread: the caller's.
    Sequential,
    /// rayon's current thread pool (wrap the call in `ThreadPool::install` to choose the
    /// threads), in tasks of at least `min_units_per_task` predictions; batches smaller than
    /// two tasks run on the caller's thread.
    Rayon {
        /// Smallest number of predictions per task.
        min_units_per_task: usize,
    },
    /// [`Parallelism::Rayon`] with 2048 predictions per task.
    #[default]
    Auto,
}

impl Parallelism {
    fn units_per_task(self) -> Option<usize> {
        match self {
            Parallelism::Sequential => None,
            Parallelism::Rayon { min_units_per_task } => Some(min_units_per_task.max(1)),
            Parallelism::Auto => Some(2048),
        }
    }
}

/// Checks `batch` against `config` and resolves its horizons.
pub(crate) fn plan_batch(config: &MetricsConfig, batch: &TrajectoryBatch<'_>) -> Result<BatchPlan> {
    let shape = batch.shape();
    let per_prediction = config.agents_per_prediction;
    if !shape.agents.is_multiple_of(per_prediction) {
        return Err(Error::AgentsNotGroupable {
            agents: shape.agents,
            agents_per_prediction: per_prediction,
        });
    }
    let units = shape.agents / per_prediction;
    if let Some(p) = batch.probabilities() {
        let rows = p.len() / shape.modes;
        if rows != units {
            return Err(Error::ShapeMismatch {
                field: "probabilities",
                expected: format!("[{units}, {}] (one row per prediction)", shape.modes),
                actual: format!("[{rows}, {}]", shape.modes),
            });
        }
        for (prediction, row) in p.chunks_exact(shape.modes).enumerate() {
            check_probability_row(&config.probabilities, prediction, row)?;
        }
    }
    if batch.trajectory_types().is_some() && batch.probabilities().is_none() {
        return Err(Error::MissingInput {
            field: "probabilities",
            needed_by: "mAP (the batch has trajectory types)",
        });
    }
    if config.needs_motion() {
        for (field, present) in [
            ("velocity", batch.velocity().is_some()),
            ("heading", batch.heading().is_some()),
        ] {
            if !present {
                return Err(Error::MissingInput {
                    field,
                    needed_by: "the lateral/longitudinal miss rule",
                });
            }
        }
    }
    let last_steps = config
        .horizons
        .iter()
        .enumerate()
        .map(|(index, horizon)| horizon.resolve(index, shape.steps))
        .collect::<Result<Vec<_>>>()?;
    Ok(BatchPlan::new(config, last_steps, shape.modes))
}

/// Measures a planned batch and returns its sums.
pub(crate) fn measure(
    config: &MetricsConfig,
    plan: &BatchPlan,
    batch: &TrajectoryBatch<'_>,
    parallelism: Parallelism,
) -> MetricSums {
    let per_prediction = config.agents_per_prediction;
    let units = batch.shape().agents / per_prediction;
    match parallelism.units_per_task() {
        Some(per_task) if units >= 2 * per_task => {
            let tasks = units.div_ceil(per_task);
            let parts: Vec<MetricSums> = (0..tasks)
                .into_par_iter()
                .map(|task| {
                    let start = task * per_task;
                    let end = (start + per_task).min(units);
                    let part =
                        batch.agents(start * per_prediction, end * per_prediction, per_prediction);
                    measure_sequential(config, plan, &part)
                })
                .collect();
            // Merged in task order, one after another: rayon's `reduce` would group the f64
            // additions as its work splitting fell, so the last bits could change between runs.
            let mut parts = parts.into_iter();
            let mut sums = parts
                .next()
                .unwrap_or_else(|| MetricSums::for_config(config));
            for part in parts {
                sums.merge(&part);
            }
            sums
        }
        _ => measure_sequential(config, plan, batch),
    }
}

/// Whether every agent of `agents` has an all-false validity row (the documented padding).
fn is_padding(batch: &TrajectoryBatch<'_>, agents: std::ops::Range<usize>) -> bool {
    let steps = batch.shape().steps;
    batch.valid().is_some_and(|valid| {
        valid[agents.start * steps..agents.end * steps]
            .iter()
            .all(|&v| !v)
    })
}

fn measure_sequential(
    config: &MetricsConfig,
    plan: &BatchPlan,
    batch: &TrajectoryBatch<'_>,
) -> MetricSums {
    let shape = batch.shape();
    let per_prediction = config.agents_per_prediction;
    let mut sums = MetricSums::for_config(config);
    let mut errors = UnitErrors::new(config.horizons.len(), shape.modes, shape.steps);
    let mut order = Vec::with_capacity(shape.modes);
    let mut by_confidence = Vec::with_capacity(shape.modes);
    for unit in 0..shape.agents / per_prediction {
        let agents = unit * per_prediction..(unit + 1) * per_prediction;
        errors.reset();
        for agent in agents.clone() {
            errors.add_agent(config, plan, batch, agent);
        }
        errors.average_over(per_prediction);
        let probabilities = batch
            .probabilities()
            .map(|p| &p[unit * shape.modes..][..shape.modes]);
        rank_modes(config.pruning, shape.modes, probabilities, &mut order);
        accumulate_unit(config, plan, &errors, &order, probabilities, &mut sums);
        if let (Some(types), Some(confidences)) = (batch.trajectory_types(), probabilities)
            && let Some(bucket) = prediction_bucket(&types[agents.clone()])
        {
            add_match_samples(
                config,
                plan,
                &errors,
                &order,
                confidences,
                bucket,
                &mut by_confidence,
                &mut sums,
            );
        }
        // A prediction none of whose agents is valid at any step pads the batch: Waymo is never
        // given one. Any other counts, as Waymo counts every prediction of an object valid at
        // the current time, whether or not its ground truth is valid at the horizon's steps.
        if let Some(boxes) = batch.boxes()
            && !is_padding(batch, agents.clone())
        {
            add_overlap(plan, batch, boxes, agents, &order, probabilities, &mut sums);
        }
    }
    sums
}
