//! The finder against a simulated device whose memory grows linearly with the batch.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::MemoryReading;

/// A device where a step at batch size `b` peaks at `base + per_sample × b` bytes.
struct Linear {
    base: u64,
    per_sample: u64,
    peak: AtomicU64,
}

impl MemoryProbe for Linear {
    fn name(&self) -> &str {
        "linear"
    }
    fn read(&self) -> std::result::Result<MemoryReading, String> {
        Ok(MemoryReading {
            peak_bytes: Some(self.peak.load(Ordering::SeqCst)),
            ..MemoryReading::default()
        })
    }
    fn reset_peak(&self) {
        self.peak.store(0, Ordering::SeqCst);
    }
}

fn device() -> Arc<Linear> {
    Arc::new(Linear {
        base: 1000,
        per_sample: 10,
        peak: AtomicU64::new(0),
    })
}

fn step(device: &Linear, batch: usize) -> std::result::Result<(), String> {
    device.peak.store(
        device.base + device.per_sample * batch as u64,
        Ordering::SeqCst,
    );
    Ok(())
}

#[test]
fn binsearch_lands_within_its_margin_of_the_budget_limit() {
    let device = device();
    // 1000 + 10 b <= 5000 → b <= 400.
    let report = BatchSizeFinder::new(FinderMode::BinSearch)
        .probe(device.clone())
        .budget_bytes(5000)
        .run(|batch, _| step(&device, batch))
        .unwrap();
    assert_eq!(report.largest_fitting, 400);
    assert_eq!(report.found, 380);
    assert!(report.trials.iter().any(|trial| !trial.fits));
    let over = report.trials.iter().find(|trial| !trial.fits).unwrap();
    assert!(over.reason.as_ref().unwrap().contains("budget"));
    assert!(over.peak_bytes.unwrap() > 5000);
}

#[test]
fn each_trial_is_reported_as_it_ends() {
    let device = device();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let report = BatchSizeFinder::new(FinderMode::BinSearch)
        .probe(device.clone())
        .budget_bytes(5000)
        .on_trial({
            let seen = Arc::clone(&seen);
            move |trial| seen.lock().unwrap().push((trial.batch_size, trial.fits))
        })
        .run(|batch, _| step(&device, batch))
        .unwrap();
    let reported: Vec<(usize, bool)> = report
        .trials
        .iter()
        .map(|trial| (trial.batch_size, trial.fits))
        .collect();
    assert_eq!(*seen.lock().unwrap(), reported);
}

#[test]
fn power_and_shrink_and_the_dataset_cap() {
    let device = device();
    let power = BatchSizeFinder::new(FinderMode::Power)
        .probe(device.clone())
        .budget_bytes(5000)
        .run(|batch, _| step(&device, batch))
        .unwrap();
    assert_eq!(power.found, 256);
    let shrink = BatchSizeFinder::new(FinderMode::Shrink)
        .start(1000)
        .probe(device.clone())
        .budget_bytes(5000)
        .run(|batch, _| step(&device, batch))
        .unwrap();
    assert!(shrink.found <= 400 && shrink.found as f64 >= 400.0 * 0.9);
    let capped = BatchSizeFinder::new(FinderMode::BinSearch)
        .dataset_size(100)
        .probe(device.clone())
        .budget_bytes(5000)
        .run(|batch, _| step(&device, batch))
        .unwrap();
    assert_eq!(capped.largest_fitting, 100);
    assert!(capped.trials.iter().all(|trial| trial.batch_size <= 100));
}

#[test]
fn nothing_fits_and_other_failures_are_errors() {
    let device = device();
    let error = BatchSizeFinder::new(FinderMode::BinSearch)
        .probe(device.clone())
        .budget_bytes(500)
        .run(|batch, _| step(&device, batch))
        .unwrap_err();
    assert!(
        matches!(error, Error::NothingFits { smallest: 1, .. }),
        "{error}"
    );
    // Out of trials far above the limit is not "nothing fits".
    let error = BatchSizeFinder::new(FinderMode::Shrink)
        .start(8192)
        .max_trials(3)
        .probe(device.clone())
        .budget_bytes(5000)
        .run(|batch, _| step(&device, batch))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::TrialsExhausted {
                trials: 3,
                smallest: 6634
            }
        ),
        "{error}"
    );
    let error = BatchSizeFinder::default()
        .run(|batch, _| {
            if batch > 8 {
                Err("index out of bounds")
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert!(error.to_string().contains("index out of bounds"), "{error}");
    let error = BatchSizeFinder::default()
        .budget_bytes(10)
        .run(|_, _| Ok::<(), String>(()))
        .unwrap_err();
    assert!(matches!(
        error,
        Error::InvalidSetting {
            setting: "budget_bytes",
            ..
        }
    ));
}

#[test]
fn run_restoring_gives_every_trial_the_original_state() {
    let original = vec![1.0_f32; 4];
    let mut seen = Vec::new();
    let report = BatchSizeFinder::new(FinderMode::Power)
        .max_size(16)
        .run_restoring(&original, |mut state: Vec<f32>, batch, _| {
            seen.push(state.clone());
            state.iter_mut().for_each(|value| *value += batch as f32);
            Ok::<(), String>(())
        })
        .unwrap();
    assert_eq!(report.found, 16);
    assert!(seen.iter().all(|state| state == &original));
    assert_eq!(original, vec![1.0; 4]);
}
