//! One trial: run the user's steps at a batch size, catch what goes wrong, read the memory.

use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::out_of_memory::is_out_of_memory;
use crate::MemoryProbe;

/// What one trial did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// The batch size tried.
    pub batch_size: usize,
    /// Whether every step ran within memory (and within the budget, when one is set).
    pub fits: bool,
    /// The highest memory figure the probe saw during the trial, in bytes.
    pub peak_bytes: Option<u64>,
    /// How long the trial took, in seconds (process start included in child mode).
    pub seconds: f64,
    /// Why it did not fit: the error, the panic or the budget check.
    pub reason: Option<String>,
}

/// A trial's result before it is placed in the report: fits or out of memory, or a failure
/// that is not about memory (which stops the search).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub(crate) enum Outcome {
    Fits {
        peak_bytes: Option<u64>,
    },
    OutOfMemory {
        peak_bytes: Option<u64>,
        reason: String,
    },
    Failed {
        message: String,
    },
}

/// Runs `steps` steps at `batch_size` in this process: cleans the pool before, starts a peak
/// window, catches panics, and judges the peak against `budget`.
pub(crate) fn run_in_process<E: Display>(
    trial: &mut dyn FnMut(usize, usize) -> Result<(), E>,
    batch_size: usize,
    steps: usize,
    probe: Option<&dyn MemoryProbe>,
    budget: Option<u64>,
) -> Outcome {
    if let Some(probe) = probe {
        probe.cleanup();
        probe.reset_peak();
    }
    let result = catch_unwind(AssertUnwindSafe(|| trial(batch_size, steps)));
    let reading = probe.map(|probe| {
        probe
            .read()
            .map(|reading| reading.peak_bytes.unwrap_or(reading.reserved_bytes))
    });
    let peak_bytes = reading
        .as_ref()
        .and_then(|reading| reading.as_ref().ok().copied());
    if let Some(probe) = probe {
        probe.cleanup();
    }
    let message = match result {
        Ok(Ok(())) => {
            return match (peak_bytes, budget) {
                (Some(peak), Some(budget)) if peak > budget => Outcome::OutOfMemory {
                    peak_bytes,
                    reason: format!("above the memory budget: {peak} > {budget} bytes"),
                },
                // A budget that cannot be checked protects nothing: stop rather than guess.
                (None, Some(budget)) => Outcome::Failed {
                    message: match reading {
                        Some(Err(reason)) => format!(
                            "the memory probe could not be read to check the budget of \
                             {budget} bytes: {reason}"
                        ),
                        _ => format!(
                            "a memory budget of {budget} bytes is set but there is no memory \
                             probe to check it against"
                        ),
                    },
                },
                _ => Outcome::Fits { peak_bytes },
            };
        }
        Ok(Err(error)) => error.to_string(),
        Err(panic) => format!("panicked: {}", kiln_ml_core::panic_message(panic.as_ref())),
    };
    if is_out_of_memory(&message) {
        Outcome::OutOfMemory {
            peak_bytes,
            reason: message,
        }
    } else {
        Outcome::Failed { message }
    }
}

/// Times a trial and turns its outcome into a report line (or the failure that stops the
/// search).
pub(crate) fn timed(
    batch_size: usize,
    run: impl FnOnce() -> Result<Outcome, crate::Error>,
) -> Result<Trial, crate::Error> {
    let started = Instant::now();
    let outcome = run()?;
    let seconds = started.elapsed().as_secs_f64();
    match outcome {
        Outcome::Fits { peak_bytes } => Ok(Trial {
            batch_size,
            fits: true,
            peak_bytes,
            seconds,
            reason: None,
        }),
        Outcome::OutOfMemory { peak_bytes, reason } => Ok(Trial {
            batch_size,
            fits: false,
            peak_bytes,
            seconds,
            reason: Some(reason),
        }),
        Outcome::Failed { message } => Err(crate::Error::Run {
            during: format!("the batch-size trial at {batch_size}"),
            message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::MemoryReading;

    /// A probe whose reading the test sets.
    #[derive(Default)]
    struct FakeProbe {
        peak: AtomicU64,
        cleanups: AtomicU64,
    }

    impl MemoryProbe for FakeProbe {
        fn name(&self) -> &str {
            "fake"
        }
        fn read(&self) -> Result<MemoryReading, String> {
            Ok(MemoryReading {
                peak_bytes: Some(self.peak.load(Ordering::SeqCst)),
                ..MemoryReading::default()
            })
        }
        fn reset_peak(&self) {
            self.peak.store(0, Ordering::SeqCst);
        }
        fn cleanup(&self) {
            self.cleanups.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn budget_errors_and_panics_are_classified() {
        let probe = FakeProbe::default();
        let mut trial = |batch: usize, _steps: usize| -> Result<(), String> {
            match batch {
                1 => Err("CUDA error: out of memory".to_owned()),
                2 => panic!("can't allocate buffer of size: 4"),
                3 => Err("shape mismatch".to_owned()),
                _ => {
                    probe.peak.store(batch as u64 * 100, Ordering::SeqCst);
                    Ok(())
                }
            }
        };
        let outcome = |batch, trial: &mut dyn FnMut(usize, usize) -> Result<(), String>| {
            run_in_process(trial, batch, 3, Some(&probe), Some(1000))
        };
        assert!(matches!(
            outcome(1, &mut trial),
            Outcome::OutOfMemory { .. }
        ));
        assert!(matches!(
            outcome(2, &mut trial),
            Outcome::OutOfMemory { .. }
        ));
        assert!(matches!(outcome(3, &mut trial), Outcome::Failed { .. }));
        assert_eq!(
            outcome(10, &mut trial),
            Outcome::Fits {
                peak_bytes: Some(1000)
            }
        );
        assert!(matches!(
            outcome(11, &mut trial),
            Outcome::OutOfMemory {
                peak_bytes: Some(1100),
                ..
            }
        ));
        // Cleaned before and after every trial.
        assert_eq!(probe.cleanups.load(Ordering::SeqCst), 10);
    }

    struct Unreadable;

    impl MemoryProbe for Unreadable {
        fn name(&self) -> &str {
            "gone"
        }
        fn read(&self) -> Result<MemoryReading, String> {
            Err("the pool is gone".to_owned())
        }
    }

    #[test]
    fn a_budget_the_probe_cannot_check_stops_the_trial() {
        let mut fits = |_: usize, _: usize| Ok::<_, String>(());
        let outcome = run_in_process(&mut fits, 8, 1, Some(&Unreadable), Some(1000));
        let Outcome::Failed { message } = outcome else {
            panic!("an unchecked budget counted as fitting: {outcome:?}");
        };
        assert!(
            message.contains("budget of 1000 bytes: the pool is gone"),
            "{message}"
        );
        // Without a budget the reading is only a figure: the trial fits, its peak unknown.
        let outcome = run_in_process(&mut fits, 8, 1, Some(&Unreadable), None);
        assert_eq!(outcome, Outcome::Fits { peak_bytes: None });
    }
}
