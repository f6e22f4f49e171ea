//! A progress bar for training: epoch, step, loss, learning rate, loss scale, samples/s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln_ml_core::{Event, Observer, StepOutcome};

/// An [`Observer`] drawing an indicatif progress bar on stderr, hidden when stderr is not a
/// terminal (CI logs, redirected output).
///
/// ```
/// use kiln_ml_core::{Event, Observer, StepOutcome, StepReport};
/// use kiln_ml_train::ProgressObserver;
///
/// let progress = ProgressObserver::hidden().with_total_steps(10);
/// progress.on_event(&Event::EpochStart { epoch: 0 });
/// progress.on_event(&Event::Step(StepReport {
///     step: 1,
///     outcome: StepOutcome::Applied,
///     loss: Some(0.5),
///     loss_scale: Some(65536.0),
///     grad_norm: Some(1.0),
///     learning_rate: 1e-3,
/// }));
/// assert!(progress.message().contains("loss 0.5000"));
/// ```
pub struct ProgressObserver {
    bar: ProgressBar,
    samples: AtomicU64,
    /// The bits of the last loss a step read back, valid once `has_loss` is set: steps that
    /// read nothing back keep showing it (a NaN loss included).
    last_loss_bits: AtomicU64,
    has_loss: AtomicBool,
}

impl ProgressObserver {
    /// A bar on stderr when it is a terminal, hidden otherwise (indicatif checks).
    pub fn new() -> Self {
        Self::with_draw_target(ProgressDrawTarget::stderr())
    }

    /// A bar that never draws (for tests and quiet runs).
    pub fn hidden() -> Self {
        Self::with_draw_target(ProgressDrawTarget::hidden())
    }

    fn with_draw_target(target: ProgressDrawTarget) -> Self {
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(
            ProgressStyle::with_template("{prefix} step {pos}{len_text} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self {
            bar,
            samples: AtomicU64::new(0),
            last_loss_bits: AtomicU64::new(0),
            has_loss: AtomicBool::new(false),
        }
    }

    /// Shows the bar against a known number of optimizer steps.
    pub fn with_total_steps(self, steps: u64) -> Self {
        self.bar.set_length(steps);
        self.bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] step {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        self
    }

    /// The current status line (loss, lr, scale, samples/s).
    pub fn message(&self) -> String {
        self.bar.message()
    }

    /// Runs `print` with the bar hidden, so lines printed meanwhile do not tear it.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        self.bar.suspend(print)
    }

    /// Stops drawing and leaves the last state on screen.
    pub fn finish(&self) {
        self.bar.finish();
    }
}

impl Default for ProgressObserver {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for ProgressObserver {
    fn on_event(&self, event: &Event) {
        // Steps after `finish` (a closing benchmark, say) leave the finished bar as it is.
        if self.bar.is_finished() {
            return;
        }
        match event {
            Event::EpochStart { epoch } => self.bar.set_prefix(format!("epoch {epoch}")),
            Event::BatchReady { samples, .. } => {
                self.samples.fetch_add(*samples, Ordering::Relaxed);
            }
            Event::Step(report) => {
                let seconds = self.bar.elapsed().as_secs_f64();
                let samples = self.samples.load(Ordering::Relaxed) as f64;
                let rate = if seconds > 0.0 {
                    samples / seconds
                } else {
                    0.0
                };
                let scale = report
                    .loss_scale
                    .map(|scale| format!(" scale {scale}"))
                    .unwrap_or_default();
                let skipped = match report.outcome {
                    StepOutcome::Applied => "",
                    StepOutcome::Skipped(_) => " (skipped)",
                };
                if let Some(loss) = report.loss {
                    self.last_loss_bits.store(loss.to_bits(), Ordering::Relaxed);
                    self.has_loss.store(true, Ordering::Relaxed);
                }
                let loss = if self.has_loss.load(Ordering::Relaxed) {
                    let bits = self.last_loss_bits.load(Ordering::Relaxed);
                    format!("loss {:.4} ", f64::from_bits(bits))
                } else {
                    String::new()
                };
                self.bar.set_message(format!(
                    "{loss}lr {:.2e}{scale} {rate:.0} samples/s{skipped}",
                    report.learning_rate
                ));
                self.bar.set_position(report.step);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::StepReport;

    use super::*;

    fn step(step: u64, loss: Option<f64>) -> Event {
        Event::Step(StepReport {
            loss,
            ..StepReport::applied(step, 1e-3)
        })
    }

    #[test]
    fn a_nan_loss_is_shown_and_kept_until_the_next_read() {
        let progress = ProgressObserver::hidden();
        progress.on_event(&step(1, None));
        assert!(
            !progress.message().contains("loss"),
            "{}",
            progress.message()
        );
        for nan in [f64::NAN, -f64::NAN] {
            progress.on_event(&step(2, Some(nan)));
            progress.on_event(&step(3, None));
            assert!(
                progress.message().contains("loss NaN"),
                "{}",
                progress.message()
            );
        }
    }
}
