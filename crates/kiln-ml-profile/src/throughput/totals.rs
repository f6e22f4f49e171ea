//! The newest value of every counter, so that a counter going backwards is caught.

use std::time::Duration;

use super::ThroughputSample;
use crate::{Error, Result};

/// The newest totals seen, warm-up updates included. An optional counter keeps its newest
/// value across updates that lack it, so `Some(100)`, `None`, `Some(50)` is still caught.
#[derive(Debug, Clone, Copy)]
pub(super) struct Totals {
    elapsed: Duration,
    optimizer_steps: u64,
    micro_batches: u64,
    samples: u64,
    items: Option<u64>,
    flops: Option<f64>,
}

impl Totals {
    /// Fails when `sample` has a counter below `previous` (the totals before it, if any), or
    /// FLOPs that are not a finite, non-negative number.
    pub(super) fn check(previous: Option<&Totals>, sample: &ThroughputSample) -> Result<()> {
        if let Some(flops) = sample.flops
            && !(flops.is_finite() && flops >= 0.0)
        {
            return Err(invalid(format!(
                "flops is {flops}; it must be a finite, non-negative total"
            )));
        }
        let Some(last) = previous else {
            return Ok(());
        };
        if sample.elapsed < last.elapsed {
            let (now, before) = (sample.elapsed, last.elapsed);
            return Err(backwards(
                "elapsed",
                format!("{now:?}"),
                format!("{before:?}"),
            ));
        }
        let counters = [
            (
                "optimizer_steps",
                sample.optimizer_steps,
                last.optimizer_steps,
            ),
            ("micro_batches", sample.micro_batches, last.micro_batches),
            ("samples", sample.samples, last.samples),
        ];
        for (name, now, before) in counters {
            if now < before {
                return Err(backwards(name, now.to_string(), before.to_string()));
            }
        }
        if let (Some(now), Some(before)) = (sample.items, last.items)
            && now < before
        {
            return Err(backwards("items", now.to_string(), before.to_string()));
        }
        if let (Some(now), Some(before)) = (sample.flops, last.flops)
            && now < before
        {
            return Err(backwards("flops", now.to_string(), before.to_string()));
        }
        Ok(())
    }

    /// The totals after `sample` (already checked).
    pub(super) fn after(previous: Option<&Totals>, sample: &ThroughputSample) -> Totals {
        Totals {
            elapsed: sample.elapsed,
            optimizer_steps: sample.optimizer_steps,
            micro_batches: sample.micro_batches,
            samples: sample.samples,
            items: sample.items.or(previous.and_then(|last| last.items)),
            flops: sample.flops.or(previous.and_then(|last| last.flops)),
        }
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidSetting {
        setting: "throughput sample",
        message,
    }
}

fn backwards(counter: &str, now: String, before: String) -> Error {
    invalid(format!(
        "{counter} went backwards ({now} after {before}); pass totals since the start, not \
         per-step amounts, or reset() when the counters restart"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(step: u64) -> ThroughputSample {
        ThroughputSample {
            elapsed: Duration::from_secs(step),
            optimizer_steps: step,
            micro_batches: 4 * step,
            samples: 32 * step,
            items: Some(512 * step),
            flops: Some(1e9 * step as f64),
        }
    }

    #[test]
    fn counters_going_backwards_are_errors() {
        type Change = fn(&mut ThroughputSample);
        let changes: [(&str, Change); 6] = [
            ("elapsed", |s| s.elapsed = Duration::from_millis(100)),
            ("optimizer_steps", |s| s.optimizer_steps = 1),
            ("micro_batches", |s| s.micro_batches = 1),
            ("samples", |s| s.samples = 1),
            ("items", |s| s.items = Some(1)),
            ("flops", |s| s.flops = Some(1.0)),
        ];
        let before = Totals::after(None, &at(2));
        for (counter, change) in changes {
            let mut sample = at(3);
            change(&mut sample);
            let error = Totals::check(Some(&before), &sample).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidSetting { setting: "throughput sample", message }
                    if message.starts_with(counter)),
                "{counter}: {error}"
            );
        }
        assert!(Totals::check(Some(&before), &at(3)).is_ok());
        assert!(
            Totals::check(Some(&before), &at(2)).is_ok(),
            "equal totals are fine"
        );
    }

    #[test]
    fn optional_counters_are_checked_across_gaps() {
        let first = Totals::after(None, &at(2));
        let gap = ThroughputSample {
            items: None,
            flops: None,
            ..at(3)
        };
        Totals::check(Some(&first), &gap).unwrap();
        let second = Totals::after(Some(&first), &gap);
        let error = Totals::check(
            Some(&second),
            &ThroughputSample {
                items: Some(10),
                ..at(4)
            },
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("items went backwards"),
            "{error}"
        );
    }

    #[test]
    fn flops_must_be_finite_and_non_negative() {
        for flops in [f64::NAN, f64::INFINITY, -1.0] {
            let sample = ThroughputSample {
                flops: Some(flops),
                ..at(1)
            };
            assert!(Totals::check(None, &sample).is_err(), "{flops}");
        }
    }
}
