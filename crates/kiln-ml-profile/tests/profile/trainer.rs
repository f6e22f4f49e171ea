//! kiln-ml-profile's observers on kiln's real trainer: the phase timer's counts and syncs in each
//! mode and the throughput meter's per-optimizer-step window. On flex, and on wgpu with the
//! `wgpu` feature. (The batch-size finder's real-trainer tests: `finder.rs`, `finder_child.rs`.)

use std::sync::Arc;

use burn::backend::Autodiff;
use burn::optim::AdamConfig;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::PlainBatches;
use kiln_ml_profile::{Clock, PhaseTimer, Throughput, ThroughputMeter, TimingMode, flops};
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch, teacher_batches};
use kiln_ml_train::{Trainer, TrainerConfig, materialize};

type Flex = Autodiff<burn::backend::Flex>;

const STEPS: u64 = 6;
const ACCUMULATION: u32 = 2;

fn trainer<B: AutodiffBackend>(
    device: &B::Device,
    accumulation: u32,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64> {
    let config = TrainerConfig::new()
        .with_num_epochs(1)
        .with_accumulation_steps(accumulation);
    trainer_with::<B>(device, config)
}

fn trainer_with<B: AutodiffBackend>(
    device: &B::Device,
    config: TrainerConfig,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64> {
    B::seed(device, 3);
    let model = MlpConfig::new(4, &[16], 1).init::<B>(device);
    materialize(&model);
    Trainer::new(
        model,
        AdamConfig::new().init(),
        1e-2,
        config,
        device.clone(),
    )
    .unwrap()
}

fn batches<B: AutodiffBackend>(device: &B::Device) -> Vec<RegressionBatch<B>> {
    teacher_batches(STEPS as usize * ACCUMULATION as usize, 8, 11, device)
}

/// Fits one epoch of `STEPS` optimizer steps of `ACCUMULATION` micro-batches, timed in `mode`.
fn timed_fit<B: AutodiffBackend>(
    device: B::Device,
    mode: TimingMode,
) -> kiln_ml_profile::PhaseReport {
    let timer = Arc::new(PhaseTimer::new(Clock::start(), mode));
    let mut trainer = trainer::<B>(&device, ACCUMULATION);
    trainer.add_observer(Arc::clone(&timer));
    let data = batches::<B>(&device);
    trainer
        .fit(|position| PlainBatches::new(data.clone(), position, RegressionBatch::len))
        .unwrap();
    timer.report()
}

fn accurate_mode_syncs_every_phase<B: AutodiffBackend>(device: B::Device) {
    let report = timed_fit::<B>(device, TimingMode::Accurate);
    let micro_batches = STEPS * u64::from(ACCUMULATION);
    // The fit's first step has its own row and is left out of the steady rows.
    let steady_micro_batches = micro_batches - u64::from(ACCUMULATION);
    assert_eq!(report.steps, STEPS - 1);
    assert_eq!(report.accurate_steps, STEPS - 1);
    assert_eq!(report.row("first_step").unwrap().calls, 1);
    assert_eq!(report.batches, micro_batches);
    assert_eq!(report.samples, micro_batches * 8);
    for (phase, calls) in [
        ("forward", steady_micro_batches),
        ("backward", steady_micro_batches),
        ("host_to_device", steady_micro_batches),
        ("optimizer", STEPS - 1),
        // Every batch, plus the wait that finds the epoch's end.
        ("data_wait", steady_micro_batches + 1),
    ] {
        let row = report
            .row(phase)
            .unwrap_or_else(|| panic!("{phase} missing"));
        assert_eq!(row.calls, calls, "{phase}");
        assert!(!row.estimated, "{phase}");
    }
    // Five phases per micro-batch minus the optimizer's, plus the final data wait: all synced.
    assert_eq!(report.sync_calls, 4 * micro_batches + STEPS + 1);
    let table = report.table();
    assert!(table.contains("Training Profiler Report"), "{table}");
    assert!(table.contains("first_step"), "{table}");
}

fn cheap_mode_syncs_accurate_steps_and_the_step_before<B: AutodiffBackend>(device: B::Device) {
    let report = timed_fit::<B>(device, TimingMode::Cheap { every: 3 });
    // Step 1 (not an accurate one) is the fit's first step, reported on its own.
    assert_eq!(report.steps, STEPS - 1);
    assert_eq!(report.accurate_steps, STEPS / 3);
    let micro_batches = STEPS * u64::from(ACCUMULATION);
    // An accurate step syncs all its phases; the step before it only its optimizer phase; the
    // others not at all.
    let accurate_syncs = (STEPS / 3) * (4 * u64::from(ACCUMULATION) + 1);
    assert_eq!(report.sync_calls, accurate_syncs + STEPS / 3);
    assert_eq!(
        report.row("forward").unwrap().calls,
        micro_batches - u64::from(ACCUMULATION)
    );
    assert!(report.row("forward").unwrap().estimated);
    assert!(!report.row("data_wait").unwrap().estimated);
}

fn the_meter_counts_optimizer_steps_once<B: AutodiffBackend>(device: B::Device) {
    let flops_per_sample =
        flops::training_step(flops::linear(4, 16, true) + flops::linear(16, 1, true), 1);
    let meter = Arc::new(
        ThroughputMeter::new(
            Clock::start(),
            Throughput::new()
                .with_window(4)
                .unwrap()
                .with_peak_flops(1e12)
                .unwrap(),
        )
        .with_training_flops_per_sample(flops_per_sample),
    );
    let mut trainer = trainer::<B>(&device, ACCUMULATION);
    trainer.add_observer(Arc::clone(&meter));
    let data = batches::<B>(&device);
    trainer
        .fit(|position| PlainBatches::new(data.clone(), position, RegressionBatch::len))
        .unwrap();
    assert_eq!(meter.error(), None);
    let report = meter.report().expect("6 steps fill a window of 4");
    assert_eq!(report.window_steps, 3);
    // K micro-batches per step, 8 samples each, over the same window.
    let ratio = report.micro_batches_per_s / report.steps_per_s;
    assert!((ratio - f64::from(ACCUMULATION)).abs() < 1e-9, "{ratio}");
    let per_step = report.samples_per_s / report.steps_per_s;
    assert!((per_step - 8.0 * f64::from(ACCUMULATION)).abs() < 1e-9);
    let flops = report.flops_per_s.unwrap() / report.samples_per_s;
    assert!((flops - flops_per_sample).abs() < 1e-6 * flops_per_sample);
    assert!(report.mfu.unwrap() > 0.0);
}

#[test]
fn accurate_mode_syncs_every_phase_on_flex() {
    accurate_mode_syncs_every_phase::<Flex>(Default::default());
}

#[test]
fn cheap_mode_syncs_accurate_steps_on_flex() {
    cheap_mode_syncs_accurate_steps_and_the_step_before::<Flex>(Default::default());
}

#[test]
fn the_meter_counts_optimizer_steps_once_on_flex() {
    the_meter_counts_optimizer_steps_once::<Flex>(Default::default());
}

#[test]
fn checkpoints_are_timed_on_their_own_row_on_flex() {
    let device = Default::default();
    let directory = tempfile::tempdir().unwrap();
    let timer = Arc::new(PhaseTimer::new(Clock::start(), TimingMode::Accurate));
    let config = TrainerConfig::new()
        .with_num_epochs(1)
        .with_accumulation_steps(ACCUMULATION)
        .with_checkpoint(Some(
            kiln_ml_train::CheckpointConfig::new(directory.path()).with_every_steps(2),
        ));
    let mut trainer = trainer_with::<Flex>(&device, config);
    trainer.add_observer(Arc::clone(&timer));
    let data = batches::<Flex>(&device);
    trainer
        .fit(|position| PlainBatches::new(data.clone(), position, RegressionBatch::len))
        .unwrap();
    let report = timer.report();
    let checkpoint = report.row("checkpoint").expect("a checkpoint row");
    // Steps 2, 4 and 6; the epoch's end saves nothing more, its last step being saved.
    assert_eq!(checkpoint.calls, 3, "{checkpoint:?}");
    let saved = std::fs::read_dir(directory.path()).unwrap().count();
    assert_eq!(saved, 3, "keep_last 3 of steps 2, 4 and 6");
    assert!(checkpoint.total_seconds > 0.0);
    // Saved between steps: no step's time holds it.
    let steps = report.row("step").unwrap().total_seconds;
    let first = report.row("first_step").unwrap().total_seconds;
    assert!(steps + first + checkpoint.total_seconds <= report.wall_seconds + 1e-6);
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;

    type Wgpu = Autodiff<burn::backend::Wgpu>;

    #[test]
    fn accurate_mode_syncs_every_phase_on_wgpu() {
        if let Some(device) = kiln_ml_testkit::wgpu_device() {
            accurate_mode_syncs_every_phase::<Wgpu>(device);
        }
    }

    #[test]
    fn cheap_mode_syncs_accurate_steps_on_wgpu() {
        if let Some(device) = kiln_ml_testkit::wgpu_device() {
            cheap_mode_syncs_accurate_steps_and_the_step_before::<Wgpu>(device);
        }
    }
}
