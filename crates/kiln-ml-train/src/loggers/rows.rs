//! Turning the trainer's events into rows of named scalars, every N optimizer steps.

use std::collections::BTreeMap;
use std::time::Instant;

use kiln_ml_core::Event;

/// The scalars of one logged moment: a training row every N optimizer steps, or the metrics
/// an epoch logged.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    /// The epoch.
    pub epoch: u64,
    /// Optimizer steps run.
    pub step: u64,
    /// Seconds since the logger started.
    pub elapsed_seconds: f64,
    /// Scalars by name: `train/loss`, `train/lr`, `train/loss_scale`, `train/grad_norm`,
    /// `train/samples_per_second`, `time/PHASE_ms` (the phase's time per optimizer step over
    /// the row's steps, all its micro-batches together; `time/validation_ms` per validation
    /// pass), and whatever was logged with `Trainer::log_metric` (`valid/min_ade`).
    pub values: BTreeMap<String, f64>,
}

/// Collects events into [`LogRow`]s: one every `every_steps` optimizer steps with the latest
/// loss read back (set [`read_loss_every`](crate::TrainerConfig::read_loss_every) to the same N
/// to have one for every row without a sync per step), the learning rate, throughput and
/// phase times; and one per step at which metrics were logged.
#[derive(Debug)]
pub struct LogRows {
    every_steps: u64,
    started: Instant,
    epoch: u64,
    loss: Option<f64>,
    samples: u64,
    window_started: Instant,
    phase_totals: BTreeMap<&'static str, (f64, u64)>,
    /// Optimizer steps since the last training row.
    steps_in_window: u64,
    /// Metrics waiting for the next row boundary, with their step.
    pending_metrics: Option<LogRow>,
}

impl LogRows {
    /// A row every `every_steps` optimizer steps (at least 1).
    pub fn new(every_steps: u64) -> Self {
        let now = Instant::now();
        Self {
            every_steps: every_steps.max(1),
            started: now,
            epoch: 0,
            loss: None,
            samples: 0,
            window_started: now,
            phase_totals: BTreeMap::new(),
            steps_in_window: 0,
            pending_metrics: None,
        }
    }

    /// Takes one event; returns the rows it completes (metrics are grouped per step, so a
    /// metric row comes out at the next event that is not a metric).
    pub fn on_event(&mut self, event: &Event) -> Vec<LogRow> {
        let mut rows = Vec::new();
        if !matches!(event, Event::Metric { .. })
            && let Some(row) = self.pending_metrics.take()
        {
            rows.push(row);
        }
        match event {
            Event::EpochStart { epoch } => self.epoch = *epoch,
            Event::BatchReady { samples, .. } => self.samples += samples,
            Event::PhaseEnd { phase, elapsed, .. } => {
                let total = self.phase_totals.entry(phase.name()).or_insert((0.0, 0));
                total.0 += elapsed.as_secs_f64() * 1e3;
                total.1 += 1;
            }
            Event::Step(report) => {
                self.steps_in_window += 1;
                if let Some(loss) = report.loss {
                    self.loss = Some(loss);
                }
                if report.step.is_multiple_of(self.every_steps) {
                    rows.push(self.training_row(report));
                }
            }
            Event::Metric {
                name,
                value,
                epoch,
                step,
            } => {
                let elapsed_seconds = self.started.elapsed().as_secs_f64();
                let row = match self.pending_metrics.take() {
                    Some(row) if row.step == *step && row.epoch == *epoch => row,
                    other => {
                        rows.extend(other);
                        LogRow {
                            epoch: *epoch,
                            step: *step,
                            elapsed_seconds,
                            values: BTreeMap::new(),
                        }
                    }
                };
                let mut row = row;
                row.values.insert(name.clone(), *value);
                self.pending_metrics = Some(row);
            }
            _ => {}
        }
        rows
    }

    /// Whether metrics wait for a row boundary ([`flush`](Self::flush) would return them).
    pub fn has_pending(&self) -> bool {
        self.pending_metrics.is_some()
    }

    /// The metrics still waiting for a row boundary (at the end of a run).
    pub fn flush(&mut self) -> Option<LogRow> {
        self.pending_metrics.take()
    }

    fn training_row(&mut self, report: &kiln_ml_core::StepReport) -> LogRow {
        let mut values = BTreeMap::new();
        if let Some(loss) = self.loss {
            values.insert("train/loss".to_owned(), loss);
        }
        values.insert("train/lr".to_owned(), report.learning_rate);
        if let Some(scale) = report.loss_scale {
            values.insert("train/loss_scale".to_owned(), scale);
        }
        if let Some(norm) = report.grad_norm {
            values.insert("train/grad_norm".to_owned(), norm);
        }
        let seconds = self.window_started.elapsed().as_secs_f64();
        if seconds > 0.0 && self.samples > 0 {
            values.insert(
                "train/samples_per_second".to_owned(),
                self.samples as f64 / seconds,
            );
        }
        let steps = std::mem::take(&mut self.steps_in_window).max(1);
        for (phase, (total_ms, passes)) in std::mem::take(&mut self.phase_totals) {
            // A step's phases run once per micro-batch: their time per step is their sum over
            // the step. Validation runs between steps: per pass.
            let per = if phase == kiln_ml_core::Phase::Validation.name() {
                passes
            } else {
                steps
            };
            values.insert(format!("time/{phase}_ms"), total_ms / per as f64);
        }
        self.samples = 0;
        self.window_started = Instant::now();
        LogRow {
            epoch: self.epoch,
            step: report.step,
            elapsed_seconds: self.started.elapsed().as_secs_f64(),
            values,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_ml_core::{Phase, StepReport};

    use super::*;

    fn end(phase: Phase, millis: u64) -> Event {
        Event::PhaseEnd {
            phase,
            step: 1,
            elapsed: Duration::from_millis(millis),
            sync: None,
        }
    }

    #[test]
    fn phase_times_are_per_step_with_every_micro_batch_in_it() {
        let mut rows = LogRows::new(1);
        // One step of four micro-batches, forward 1 ms each; one validation pass of 8 ms.
        for _ in 0..4 {
            rows.on_event(&end(Phase::Forward, 1));
        }
        rows.on_event(&end(Phase::Validation, 8));
        let step = Event::Step(StepReport::applied(1, 0.1));
        let row = rows.on_event(&step).pop().unwrap();
        assert_eq!(row.values["time/forward_ms"], 4.0);
        assert_eq!(row.values["time/validation_ms"], 8.0);
    }
}
