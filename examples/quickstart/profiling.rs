//! Where the quickstart's time went (kiln-ml-profile): a phase timer, a throughput meter and a
//! device monitor during training, then the cached-batch test for the input-versus-compute
//! verdict.

use std::sync::Arc;
use std::time::Duration;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::profile::EpochBounds;
use kiln_ml::profile::{
    Bottleneck, Clock, DeviceMonitor, DeviceSample, Diagnosis, MemoryProbe, PhaseReport,
    PhaseTimer, ProfileReport, Span, Throughput, ThroughputMeter, ThroughputReport, TimingMode,
};
use kiln_ml::train::{TrainStep, Trainer};

use kiln_ml_examples::cached_batch;

/// What profiling produced.
pub struct Profile {
    /// The JSON report (phases, throughput, device summaries, verdict).
    pub report: ProfileReport,
    /// The training's spans, for the timeline.
    pub spans: Vec<Span>,
    /// The monitor's samples during training, for the timeline.
    pub samples: Vec<DeviceSample>,
}

impl Profile {
    /// The phase table.
    pub fn phases(&self) -> Option<&PhaseReport> {
        self.report.phases.as_ref()
    }
}

/// The training part, taken before the cached-batch test adds steps of its own.
struct Training {
    phases: PhaseReport,
    spans: Vec<Span>,
    epochs: Vec<EpochBounds>,
    throughput: Option<ThroughputReport>,
    until: Duration,
}

/// The observers (attach them to the trainer) and the monitor, on one clock.
pub struct Profiler {
    clock: Clock,
    timer: Arc<PhaseTimer>,
    meter: Arc<ThroughputMeter>,
    monitor: DeviceMonitor,
    training: Option<Training>,
}

impl Profiler {
    /// Starts the monitor (NVML where a driver answers, the memory probe if any, the host's CPU
    /// and RAM), a phase timer in cheap mode (every phase of one step in 200 synced, and the end
    /// of the step before it) and a throughput meter over the last 99 steps (a window of 100 updates).
    pub fn start(probe: Option<Arc<dyn MemoryProbe>>) -> anyhow::Result<Self> {
        let clock = Clock::start();
        let mut monitor = DeviceMonitor::builder(clock).interval(Duration::from_millis(100));
        if let Some(probe) = probe {
            monitor = monitor.memory_probe(probe);
        }
        Ok(Self {
            clock,
            timer: Arc::new(PhaseTimer::new(clock, TimingMode::CHEAP)),
            meter: Arc::new(ThroughputMeter::new(
                clock,
                Throughput::new().report_before_full(true),
            )),
            monitor: monitor.start()?,
            training: None,
        })
    }

    /// The observers to add to the trainer.
    pub fn observers(&self) -> (Arc<PhaseTimer>, Arc<ThroughputMeter>) {
        (Arc::clone(&self.timer), Arc::clone(&self.meter))
    }

    /// Marks the end of training: what the timer, the meter and the monitor saw so far is the
    /// training's.
    pub fn training_done(&mut self) {
        self.training = Some(Training {
            phases: self.timer.report(),
            spans: self.timer.spans(),
            epochs: self.timer.epochs(),
            throughput: self.meter.report(),
            until: self.clock.now(),
        });
    }

    /// The cached-batch test ([`cached_batch::diagnose`]): `warmup` + `steps` steps on
    /// `cached`, then as many from `next_batch`.
    pub fn diagnose<B, M, O, S>(
        &self,
        trainer: &mut Trainer<B, M, O, S>,
        cached: M::Input,
        next_batch: impl FnMut() -> anyhow::Result<M::Input>,
        warmup: usize,
        steps: usize,
    ) -> anyhow::Result<Diagnosis>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B> + TrainStep<B>,
        M::Input: Clone,
        O: Optimizer<M, B>,
        S: LrScheduler,
    {
        let bottleneck = Bottleneck::new()
            .steps(warmup, steps)
            .with_monitor(&self.monitor);
        let diagnosis = cached_batch::diagnose(bottleneck, trainer, cached, next_batch)?;
        Ok(diagnosis)
    }

    /// Stops the monitor and puts the report together.
    pub fn finish(mut self, diagnosis: Option<Diagnosis>) -> Profile {
        if self.training.is_none() {
            self.training_done();
        }
        let training = self.training.take().expect("taken above");
        let mut record = self.monitor.stop();
        record.samples.retain(|sample| sample.at <= training.until);
        let mut report = ProfileReport::from_timeline(
            training.phases,
            &training.spans,
            &training.epochs,
            Some(&record),
        );
        report.throughput = training.throughput;
        report.diagnosis = diagnosis;
        Profile {
            report,
            spans: training.spans,
            samples: record.samples,
        }
    }
}
