//! `ThroughputMeter`: [`Throughput`] fed by the trainer's events.

use std::sync::Mutex;
use std::time::Duration;

use kiln_ml_core::{Event, Observer, Phase, Timing};

use crate::{Clock, Result, Throughput, ThroughputReport, ThroughputSample};

/// FLOPs of one optimizer step, given the samples it trained on.
type StepFlops = Box<dyn Fn(u64) -> f64 + Send + Sync>;

/// An [`Observer`] that keeps a [`Throughput`] window: one update per optimizer step (an
/// accumulation window counts once), micro-batches from the trainer's backward phases, samples
/// from `fit`'s `BatchReady` events (a hand-written loop over `train_batch` emits none: feed a
/// [`Throughput`] yourself there), FLOPs from a closure or a per-sample count, and the time of
/// validation (Lightning #21291) and of checkpoint saves (between steps, in none) left out of
/// the elapsed time; the window restarts when the meter's first [`Event::FirstStep`] arrives
/// (the first step has ended on the device), so its kernel compilation counts in no step. A step whose FLOP count is not a finite number at least 0 is an error
/// ([`error`](Self::error)) and counts no FLOPs; the steps after it count theirs. It asks for no device sync
/// ([`Timing::Host`]): the time read after a step is the host's, ahead of the device by at most
/// the work the trainer lets it queue (`max_queued_steps`: 2 steps by default, unbounded with
/// 0), a few steps' worth over the meter's window, and exact at every step another observer
/// (the [`PhaseTimer`](crate::PhaseTimer)) or the trainer syncs.
///
/// ```
/// use kiln_ml_core::{Event, Observer, StepReport};
/// use kiln_ml_profile::{Clock, Throughput, ThroughputMeter};
///
/// let meter = ThroughputMeter::new(Clock::start(), Throughput::new().report_before_full(true));
/// for step in 1..=3 {
///     meter.on_event(&Event::BatchReady { epoch: 0, batch: step - 1, samples: 32, wait: Default::default() });
///     std::thread::sleep(std::time::Duration::from_millis(2));
///     meter.on_event(&Event::Step(StepReport::applied(step, 0.1)));
/// }
/// let report = meter.report().unwrap();
/// assert!(report.samples_per_s > 0.0);
/// ```
pub struct ThroughputMeter {
    clock: Clock,
    step_flops: Option<StepFlops>,
    state: Mutex<MeterState>,
}

impl std::fmt::Debug for ThroughputMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThroughputMeter")
            .field("clock", &self.clock)
            .field("counts_flops", &self.step_flops.is_some())
            .field("state", &self.state)
            .finish()
    }
}

#[derive(Debug)]
struct MeterState {
    throughput: Throughput,
    steps: u64,
    micro_batches: u64,
    samples: u64,
    /// Samples when the last step ended, to tell each step's own.
    samples_at_last_step: u64,
    flops: f64,
    excluded: Duration,
    error: Option<String>,
    /// Whether the window restarted at the end of the first step already.
    first_step_seen: bool,
}

impl ThroughputMeter {
    /// A meter on `clock` feeding `throughput` (its window, warm-up and peak FLOPs).
    pub fn new(clock: Clock, throughput: Throughput) -> Self {
        Self {
            clock,
            step_flops: None,
            state: Mutex::new(MeterState {
                throughput,
                steps: 0,
                micro_batches: 0,
                samples: 0,
                samples_at_last_step: 0,
                flops: 0.0,
                excluded: Duration::ZERO,
                error: None,
                first_step_seen: false,
            }),
        }
    }

    /// Counts `flops` per trained sample (forward and backward: see
    /// [`flops::training_step`](crate::flops::training_step)), for FLOP/s and MFU.
    pub fn with_training_flops_per_sample(self, flops: f64) -> Self {
        self.with_step_flops(move |samples| flops * samples as f64)
    }

    /// Counts the FLOPs of each optimizer step with `flops`, given the samples the step trained
    /// on (a model whose cost is not linear in the batch, a sequence model counting tokens).
    pub fn with_step_flops(mut self, flops: impl Fn(u64) -> f64 + Send + Sync + 'static) -> Self {
        self.step_flops = Some(Box::new(flops));
        self
    }

    /// The rates over the window, once it holds enough steps.
    pub fn report(&self) -> Option<ThroughputReport> {
        self.lock().throughput.compute()
    }

    /// The first error the meter met, if any: a step's FLOP count that is not a finite number
    /// at least 0, or counters that went backwards in the window (the meter saw events of two
    /// runs).
    pub fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Updates the window with the counts so far, at the clock's time less what is left out.
    /// The counters now, as a window update.
    fn sample(&self, state: &MeterState) -> ThroughputSample {
        ThroughputSample {
            elapsed: self.clock.now().saturating_sub(state.excluded),
            optimizer_steps: state.steps,
            micro_batches: state.micro_batches,
            samples: state.samples,
            items: None,
            flops: self.step_flops.as_ref().map(|_| state.flops),
        }
    }

    fn record(&self, state: &mut MeterState) {
        let sample = self.sample(state);
        let outcome = state.throughput.update(sample);
        Self::keep_first_error(state, outcome);
    }

    fn keep_first_error(state: &mut MeterState, outcome: Result<()>) {
        if let Err(error) = outcome
            && state.error.is_none()
        {
            state.error = Some(error.to_string());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MeterState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Observer for ThroughputMeter {
    fn on_event(&self, event: &Event) {
        let mut state = self.lock();
        match event {
            Event::BatchReady { samples, .. } => state.samples += samples,
            Event::PhaseEnd {
                phase: Phase::Backward,
                ..
            } => state.micro_batches += 1,
            Event::PhaseEnd {
                phase: Phase::Validation,
                elapsed,
                ..
            }
            | Event::CheckpointSaved { elapsed, .. } => state.excluded += *elapsed,
            Event::Step(_) => {
                state.steps += 1;
                let step_samples = state.samples - state.samples_at_last_step;
                state.samples_at_last_step = state.samples;
                if let Some(flops) = &self.step_flops {
                    let step_flops = flops(step_samples);
                    if step_flops.is_finite() && step_flops >= 0.0 {
                        state.flops += step_flops;
                    } else if state.error.is_none() {
                        // Added, it would leave the running total invalid for good.
                        state.error = Some(format!(
                            "the FLOP count of optimizer step {} ({step_samples} samples) is \
                             {step_flops}: counted as 0",
                            state.steps
                        ));
                    }
                }
                self.record(&mut state);
            }
            // The first step ended on the device: its time (kernel compilation and autotuning
            // on a GPU) ran mostly after its `Step` event, between the window's first two
            // updates. The window restarts from here, as the phase timer leaves that step out.
            // Once: every `fit` call reports its first step, and a later call's window goes on.
            Event::FirstStep { .. } if !state.first_step_seen => {
                state.first_step_seen = true;
                // Not a step: it does not use up an update that `skip_warmup` drops.
                let sample = self.sample(&state);
                let outcome = state.throughput.restart_at(sample);
                Self::keep_first_error(&mut state, outcome);
            }
            _ => {}
        }
    }

    fn timing(&self, _step: u64) -> Timing {
        Timing::Host
    }
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::StepReport;

    use super::*;

    fn meter(clock: Clock) -> ThroughputMeter {
        ThroughputMeter::new(clock, Throughput::new().report_before_full(true))
    }

    /// A batch of 8 samples.
    fn batch(batch: u64) -> Event {
        Event::BatchReady {
            epoch: 0,
            batch,
            samples: 8,
            wait: Duration::ZERO,
        }
    }

    /// The end of optimizer step `step`.
    fn step_end(step: u64) -> Event {
        Event::Step(StepReport::applied(step, 0.1))
    }

    /// One optimizer step of 8 samples.
    fn step(meter: &ThroughputMeter, step: u64) {
        meter.on_event(&batch(step - 1));
        meter.on_event(&step_end(step));
    }

    #[test]
    fn checkpoint_saves_are_left_out_of_the_elapsed_time() {
        // Two meters on one clock see the same steps; one also hears of the save that took
        // the 20 ms between steps 2 and 3, and leaves its 10 ms out.
        let clock = Clock::start();
        let (told, untold) = (meter(clock), meter(clock));
        for number in 1..=4 {
            if number == 3 {
                std::thread::sleep(Duration::from_millis(20));
                told.on_event(&Event::CheckpointSaved {
                    path: "step-2.kiln".into(),
                    step: 2,
                    elapsed: Duration::from_millis(10),
                });
            }
            step(&told, number);
            step(&untold, number);
        }
        let (told, untold) = (told.report().unwrap(), untold.report().unwrap());
        assert!(
            told.window_seconds < untold.window_seconds - 0.005,
            "{} s against {} s",
            told.window_seconds,
            untold.window_seconds
        );
    }

    #[test]
    fn the_first_steps_time_on_the_device_is_left_out_of_the_window() {
        // Two meters on one clock see the same steps; one also hears that step 1 ended on the
        // device 20 ms after its `Step` event (its kernels compiling), and leaves that out.
        let clock = Clock::start();
        let (told, untold) = (meter(clock), meter(clock));
        for number in 1..=4 {
            step(&told, number);
            step(&untold, number);
            if number == 1 {
                std::thread::sleep(Duration::from_millis(20));
                told.on_event(&Event::FirstStep {
                    step: 1,
                    elapsed: Duration::from_millis(25),
                });
            }
        }
        // A second `fit` call's first step does not restart the window again.
        told.on_event(&Event::FirstStep {
            step: 4,
            elapsed: Duration::from_millis(1),
        });
        let (told, untold) = (told.report().unwrap(), untold.report().unwrap());
        // Steps 2 to 4 either way: from the end of step 1 on the device, or from its event.
        assert_eq!((told.window_steps, untold.window_steps), (3, 3));
        assert!(
            told.window_seconds < untold.window_seconds - 0.015,
            "{} s against {} s",
            told.window_seconds,
            untold.window_seconds
        );
    }

    /// The first step's restart is no step: `skip_warmup(n)` still drops n steps' updates.
    #[test]
    fn the_first_step_restart_does_not_use_up_a_warmup_update() {
        for (skipped, first_point) in [(1, 1), (2, 3), (3, 4)] {
            let meter = ThroughputMeter::new(
                Clock::start(),
                Throughput::new()
                    .report_before_full(true)
                    .skip_warmup(skipped),
            );
            for number in 1..=6 {
                step(&meter, number);
                if number == 1 {
                    meter.on_event(&Event::FirstStep {
                        step: 1,
                        elapsed: Duration::from_millis(1),
                    });
                }
            }
            let report = meter.report().unwrap();
            // The window runs from the end of `first_point` (step 1's end on the device when
            // only step 1 is skipped) to step 6.
            assert_eq!(report.window_steps, 6 - first_point, "skip {skipped}");
        }
    }

    #[test]
    fn a_bad_flop_count_is_an_error_and_later_steps_count_theirs() {
        let meter = meter(Clock::start())
            .with_step_flops(|samples| if samples == 8 { f64::NAN } else { 1e6 });
        step(&meter, 1);
        // Later steps train 16 samples each: counted.
        for number in 2..=4 {
            meter.on_event(&batch(2 * number));
            meter.on_event(&batch(2 * number + 1));
            meter.on_event(&step_end(number));
        }
        let error = meter.error().expect("the NaN is reported");
        assert!(
            error.contains("optimizer step 1") && error.contains("NaN"),
            "{error}"
        );
        let report = meter.report().expect("the window goes on");
        assert_eq!(report.window_steps, 3);
        assert!(report.flops_per_s.is_some_and(|flops| flops > 0.0));
    }
}
