//! kiln quickstart: train a trajectory forecaster end to end with every kiln crate.
//!
//! 1. **Data** (kiln-ml-data): writes a seeded dataset of football players' runs into many
//!    Parquet files, opens them as a `ParquetSource` (one block per row group), and caches the
//!    agent-frame preprocessing on disk, fingerprinted, built in parallel.
//! 2. **Order** (kiln-ml-sampler): every epoch is a file-aware block-shuffle plan, so reads stay
//!    sequential while batches stay mixed; the plan is a pure function of (seed, epoch).
//! 3. **Loading**: a prefetching multi-worker `Loader` executes the plan and builds Burn
//!    tensors with a Burn `Batcher` on its worker threads.
//! 4. **Training** (kiln-ml-train): a `Trainer` with the chosen precision (f32, f16 with dynamic
//!    loss scaling, or bf16), global-norm clipping, a cosine schedule and, with
//!    `--checkpoint-dir`, atomic checkpoints that resume mid-run.
//! 5. **Metrics** (kiln-ml-metrics): minADE@6, minFDE@6 and miss rate@6 exactly as Argoverse 2
//!    defines them, computed on the device after every epoch, beside a constant-velocity
//!    baseline on the same validation players (the number the model has to beat).
//! 6. **Profile** (kiln-ml-profile): where each step's time went (data wait, forward, backward,
//!    optimizer), the device's memory and utilization, and the cached-batch test's verdict:
//!    input-bound or compute-bound. With `--json`, an SVG timeline is written next to it.
//!
//! Run: `cargo run --release --example quickstart -- --help`

mod baseline;
mod dataset;
mod initial_weights;
mod logging;
mod model;
mod optimizer;
mod plain_loop;
mod profiling;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::tensor::backend::AutodiffBackend;
use clap::Parser;
use kiln_ml::backend::BackendTask;
use kiln_ml::cache::{Cached, DiskCache};
use kiln_ml::core::{BlockLayout, Metric, PlanRequest, Sampler};
use kiln_ml::data::{BurnCollate, LoaderConfig, ParquetSource};
use kiln_ml::metrics::{DeviceTrajectoryMetrics, MetricsConfig};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy, SequentialSampler, Sharding};
use kiln_ml::train::{
    BestCheckpoints, CheckpointConfig, EarlyStopping, EmaConfig, EpochSummary, GradientClipping,
    LrFinder, Mode, Precision, ProgressObserver, TrainerConfig, latest_checkpoint,
};
use kiln_ml_examples::cli::at_least_one;
use kiln_ml_examples::dataset_dir::{self, Prepared};

use crate::model::{MODES, PlayerBatch, PlayerBatcher};
use crate::optimizer::OptimizerKind;

/// Train a multi-modal trajectory forecaster on generated football data with every kiln crate:
/// Parquet blocks, a fingerprinted preprocessing cache, block-shuffle plans, a prefetching
/// loader, mixed-precision training and Argoverse 2 metrics.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Parquet files of training players.
    #[arg(long, default_value_t = 48)]
    files: u32,
    /// Training players (rows) over all files.
    #[arg(long, default_value_t = 48_000)]
    players: u64,
    /// Validation players (written to 4 more files).
    #[arg(long, default_value_t = 4_000)]
    valid_players: u64,
    /// Rows per Parquet row group (one block each).
    #[arg(long, default_value_t = 1024, value_parser = at_least_one::<usize>)]
    row_group: usize,
    /// Epochs to train.
    #[arg(long, default_value_t = 12, value_parser = at_least_one::<u64>)]
    epochs: u64,
    /// Players per batch.
    #[arg(long, default_value_t = 128, value_parser = at_least_one::<u64>)]
    batch: u64,
    /// Players per validation batch: validation keeps no activations for a backward pass, so
    /// its batches can be larger, and fewer batches launch fewer kernels (on a GPU, validation's
    /// many small metric kernels are what its time goes to).
    #[arg(long, default_value_t = 1024, value_parser = at_least_one::<u64>)]
    valid_batch: u64,
    /// Width of the model's hidden layers.
    #[arg(long, default_value_t = 256, value_parser = at_least_one::<usize>)]
    width: usize,
    /// Peak learning rate (cosine schedule), above 0 and at most 1.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Precision: f32, f16 (mixed, dynamic loss scaling) or bf16 (mixed).
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// Loader worker threads.
    #[arg(long, default_value_t = 2, value_parser = at_least_one::<usize>)]
    workers: usize,
    /// Seed of the data, the weights and the shuffle.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    device: kiln_ml_examples::cli::DeviceChoice,
    /// Keep the dataset and cache here instead of a temporary directory. Later runs reuse them
    /// when they ask for the same data (`--files`, `--players`, `--valid-players`,
    /// `--row-group`, `--seed`, recorded in DIR/dataset.json) and are refused otherwise.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write a checkpoint after every epoch here, and resume from the newest one found. Without
    /// `--dir`, the dataset and cache are kept in DIR/data, so that the next run resumes on the
    /// same files (a dataset written again elsewhere is other data, which a resume refuses).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Steps measured by the closing cached-batch test (input- or compute-bound?); 0 skips it.
    /// The test is the profiler's: none runs with `--no-profile` or `--trainer plain-burn`.
    #[arg(long, default_value_t = 12)]
    diagnose_steps: usize,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
    /// Who trains: `kiln` (kiln-ml-train's `Trainer`) or `plain-burn` (a hand-written Burn loop
    /// on the same model, batches, loss, Adam and schedule; f32 only, no profiler): the
    /// baseline kiln's step time is measured against.
    #[arg(long, default_value = "kiln")]
    trainer: TrainerKind,
    /// Train without the profiler (no phase timer, device monitor or cached-batch test).
    #[arg(long)]
    no_profile: bool,
    /// Steps the host may queue ahead of the device before kiln's trainer waits for it (its
    /// `max_queued_steps`, 2 unless given); 0 never waits. Kiln's trainer only: the plain Burn
    /// loop never waits.
    #[arg(long)]
    max_queued_steps: Option<u64>,
    /// The optimizer: Burn's `adam`, or kiln's `fused-adam` (the same arithmetic in a few
    /// kernels per step); kiln's trainer only.
    #[arg(long, default_value = "adam")]
    optimizer: OptimizerKind,
    /// Write the run's scalars here: `metrics.csv` and a TensorBoard event file (training loss,
    /// learning rate, throughput and phase times every `--log-every` steps; validation metrics
    /// every epoch). Kiln's trainer only.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Read the training loss back every N optimizer steps (one device sync each; the progress
    /// bar and the logs show it), and log a training row as often; 0 never reads it back (the
    /// logs then have no training loss), except that f16-mixed reads it every step for its loss
    /// scaler. Kiln's trainer only: the plain Burn loop reads the loss once per epoch.
    #[arg(long, default_value_t = 50)]
    log_every: u64,
    /// Stop once validation minADE@6 has not improved for N epochs in a row (the stopped run
    /// still checkpoints and reports). Kiln's trainer only.
    #[arg(long, value_parser = at_least_one::<u32>)]
    early_stopping_patience: Option<u32>,
    /// The least fall of validation minADE@6, in metres, that counts as an improvement for
    /// `--early-stopping-patience`.
    #[arg(
        long,
        default_value_t = 0.0,
        value_parser = kiln_ml_examples::cli::non_negative_finite,
        requires = "early_stopping_patience"
    )]
    early_stopping_min_delta: f64,
    /// Draw the starting weights with flex's generator on the host (the CPU run's weights)
    /// and copy them to the device, instead of the device's own generator.
    #[arg(long)]
    host_weights: bool,
    /// Multiply each starting weight by `1 + EPS u`, u uniform in [-1, 1) (seeded by
    /// `--perturb-seed`): samples how far runs from nearly the same start land.
    #[arg(long, value_name = "EPS", value_parser = kiln_ml_examples::cli::non_negative_finite)]
    perturb_weights: Option<f64>,
    /// The seed of `--perturb-weights`' draws.
    #[arg(long, default_value_t = 1, requires = "perturb_weights")]
    perturb_seed: u64,
    /// Before training, run the learning-rate range test (an exponential sweep from 1e-6 to 1
    /// over 100 steps on a copy of the model) and train with its suggestion as the peak
    /// learning rate instead of `--lr`. Kiln's trainer only.
    #[arg(long)]
    lr_find: bool,
    /// Keep an exponential moving average of the weights with this decay (0.999, say) and
    /// validate it too each epoch (`ema_min_ade` in `--json`); with `--checkpoint-dir`, its
    /// weights go to `DIR/ema.mpk` at the end. Kiln's trainer only.
    #[arg(long, value_parser = kiln_ml_examples::cli::decay)]
    ema: Option<f64>,
}

/// Who runs the training loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TrainerKind {
    /// kiln-ml-train's `Trainer`.
    Kiln,
    /// A hand-written Burn loop (`plain_loop.rs`).
    PlainBurn,
}

impl TrainerKind {
    fn name(self) -> &'static str {
        match self {
            TrainerKind::Kiln => "kiln",
            TrainerKind::PlainBurn => "plain_burn",
        }
    }
}

/// What one epoch measured.
#[derive(Debug, Clone, serde::Serialize)]
struct EpochFigures {
    epoch: u64,
    train_loss: f64,
    min_ade: f64,
    min_fde: f64,
    miss_rate: f64,
    ade_top1: f64,
    train_seconds: f64,
    samples_per_s: f64,
    data_wait_fraction: f64,
}

/// One epoch's figures from what it did (kiln-ml-train's summary, which the plain Burn loop fills
/// in too) and its validation report.
fn epoch_figures(
    epoch: &EpochSummary,
    train_loss: f64,
    report: &kiln_ml::metrics::MetricReport,
) -> EpochFigures {
    let top = |k| report.horizons[0].at(k);
    let value = |k, pick: fn(&kiln_ml::metrics::TopKReport) -> Option<f64>| {
        top(k).and_then(pick).unwrap_or(f64::NAN)
    };
    EpochFigures {
        epoch: epoch.epoch,
        train_loss,
        min_ade: value(MODES, |r| r.min_ade),
        min_fde: value(MODES, |r| r.min_fde),
        miss_rate: value(MODES, |r| r.miss_rate),
        ade_top1: value(1, |r| r.min_ade),
        train_seconds: epoch.elapsed.as_secs_f64(),
        samples_per_s: epoch.samples_per_second(),
        data_wait_fraction: epoch.data_wait_fraction(),
    }
}

/// The epoch's line of the table.
fn epoch_line(row: &EpochFigures) -> String {
    format!(
        "{:>5}  {:>10.4}  {:>8.3}  {:>8.3}  {:>5.1}%  {:>6.3}  {:>9.0}  {:>8.1}%",
        row.epoch,
        row.train_loss,
        row.min_ade,
        row.min_fde,
        100.0 * row.miss_rate,
        row.ade_top1,
        row.samples_per_s,
        100.0 * row.data_wait_fraction
    )
}

/// Milliseconds per training step over the epochs after the first (which compiles and tunes
/// on a GPU): their training time over their steps.
fn steady_step_ms(figures: &[EpochFigures], steps_per_epoch: u64) -> Option<f64> {
    let later = figures.get(1..).filter(|later| !later.is_empty())?;
    let seconds: f64 = later.iter().map(|f| f.train_seconds).sum();
    let steps = steps_per_epoch * later.len() as u64;
    (steps > 0).then(|| 1e3 * seconds / steps as f64)
}

struct Quickstart {
    args: Args,
    probe: Option<Arc<dyn kiln_ml::profile::MemoryProbe>>,
    train_dir: PathBuf,
    valid_dir: PathBuf,
    cache_dir: PathBuf,
}

/// What a run returns.
struct RunOutput {
    /// The figures of every epoch.
    figures: Vec<EpochFigures>,
    /// `None` with `--no-profile` and `--trainer plain-burn`.
    profile: Option<profiling::Profile>,
    /// The constant-velocity baseline's metrics.
    baseline: kiln_ml::metrics::TopKReport,
    /// From the start of training to the end of its first step (compilation and autotuning
    /// on a GPU); `None` when no step ran (a resumed, finished run).
    time_to_first_step: Option<Duration>,
    /// Whole batches per epoch.
    steps_per_epoch: u64,
    /// Optimizer steps skipped for non-finite gradients (f16's loss scaler backing off); `None`
    /// for the plain Burn loop.
    skipped_steps: Option<u64>,
    /// The loss scale at the end (f16-mixed only).
    loss_scale: Option<f32>,
    /// The epoch after which early stopping ended the run, if it did.
    stopped_early: Option<u64>,
    /// The range test's suggested learning rate (`--lr-find`).
    lr_find_suggestion: Option<f64>,
    /// The peak learning rate trained with.
    peak_lr: f64,
    /// Validation minADE@6 of the weights' moving average after the last epoch (`--ema`).
    ema_min_ade: Option<f64>,
}

impl BackendTask for Quickstart {
    type Output = anyhow::Result<RunOutput>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> Self::Output {
        let args = &self.args;
        let cache = Arc::new(DiskCache::open(&self.cache_dir)?);
        let cached = |dir: &Path| -> anyhow::Result<_> {
            let source = ParquetSource::builder()
                .dir(dir)
                .build_with(dataset::decoder())
                .with_context(|| format!("opening {}", dir.display()))?;
            Ok(Cached::new(
                source,
                dataset::agent_frame(),
                Arc::clone(&cache),
            ))
        };

        // Preprocess once: later epochs (and later runs with --dir) read the verified cache.
        let train = cached(&self.train_dir)?;
        let warm = train.warm()?;
        println!(
            "data      {} players in {} files, {} blocks; cache: {} blocks built, {} reused ({:.2} s)",
            train.num_samples(),
            train.num_files(),
            train.num_blocks(),
            warm.built,
            warm.already_cached,
            warm.seconds
        );
        let valid = cached(&self.valid_dir)?;
        valid.warm()?;

        let sampler = BlockShuffleConfig::default()
            .with_batch_size(args.batch)
            .with_remainder(RemainderPolicy::Drop)
            .init()?;
        let loader_config = LoaderConfig::new().with_workers(args.workers);
        let train_loader = loader_config.init(
            train,
            BurnCollate::<B, _, PlayerBatch<B>>::new(PlayerBatcher, device.clone()),
        )?;
        let valid_loader = loader_config.init(
            valid,
            BurnCollate::<B::InnerBackend, _, PlayerBatch<B::InnerBackend>>::new(
                PlayerBatcher,
                device.clone(),
            ),
        )?;
        let valid_batches = valid_loader
            .plan_epoch(
                &SequentialSampler::new(Sharding::new(args.valid_batch, RemainderPolicy::Uneven)),
                &PlanRequest::new(args.seed, 0),
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let baseline = baseline::constant_velocity(&valid_batches)?;
        println!(
            "baseline  constant velocity on the {} validation players: minADE {:.3}  minFDE {:.3}  MR {:.1}%",
            args.valid_players,
            baseline.min_ade.unwrap_or(f64::NAN),
            baseline.min_fde.unwrap_or(f64::NAN),
            100.0 * baseline.miss_rate.unwrap_or(f64::NAN)
        );

        // The plan knows how many whole batches an epoch has (the sampler drops the rest).
        let first_plan = sampler.plan(
            train_loader.source().as_ref(),
            &PlanRequest::new(args.seed, 0),
        )?;
        let steps_per_epoch = first_plan.len() as u64 / first_plan.batch_size();
        let total_steps = steps_per_epoch * args.epochs;
        let mut config = TrainerConfig::new()
            .with_precision(args.precision)
            .with_num_epochs(args.epochs)
            .with_seed(args.seed)
            .with_clipping(Some(GradientClipping::Norm { max_norm: 10.0 }));
        if let Some(dir) = &args.checkpoint_dir {
            // Now, not at the end of the first epoch: a folder that cannot be made fails first.
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating --checkpoint-dir {}", dir.display()))?;
            config = config.with_checkpoint(Some(CheckpointConfig::new(dir)));
        }
        if args.log_every > 0 {
            config = config.with_read_loss_every(args.log_every);
        }
        if let Some(steps) = args.max_queued_steps {
            config = config.with_max_queued_steps(steps);
        }
        if let Some(decay) = args.ema {
            config = config.with_ema(Some(EmaConfig::new(decay)));
        }
        let model = args.initial_weights().model::<B>(args.width, &device)?;
        // The range test trains a copy on the first epoch's batches: the model stays as built.
        let lr_found = if args.lr_find {
            // As many epochs' batches as the sweep's 100 steps take.
            let open =
                |epoch| train_loader.plan_epoch(&sampler, &PlanRequest::new(args.seed, epoch));
            let (mut epoch, mut current, mut yielded) = (0, open(0)?, false);
            let batches = std::iter::from_fn(|| {
                loop {
                    if let Some(batch) = current.next() {
                        yielded = true;
                        return Some(batch);
                    }
                    if !std::mem::take(&mut yielded) {
                        return None;
                    }
                    epoch += 1;
                    current = match open(epoch) {
                        Ok(next) => next,
                        Err(error) => return Some(Err(error)),
                    };
                }
            });
            let finding = LrFinder::new(1e-6, 1.0, 100).run(
                model.clone(),
                args.optimizer.init(),
                config.clone(),
                device.clone(),
                batches,
            )?;
            println!(
                "lr find   {} steps{}: suggested peak learning rate {}",
                finding.losses.len(),
                if finding.diverged {
                    " (stopped where the loss diverged)"
                } else {
                    ""
                },
                finding.suggestion.map_or_else(
                    || "none (too few steps)".to_owned(),
                    |lr| format!("{lr:.3e}")
                )
            );
            finding.suggestion
        } else {
            None
        };
        let peak_lr = lr_found.unwrap_or(args.lr);
        let scheduler = CosineAnnealingLrSchedulerConfig::new(peak_lr, total_steps as usize)
            .with_min_lr(peak_lr * 0.01)
            .init()
            .map_err(anyhow::Error::msg)?;
        let mut metrics = MetricsConfig::argoverse2().init()?;
        println!("epoch  train loss  minADE@6  minFDE@6  MR@6    ADE@1   samples/s  data wait");
        if args.trainer == TrainerKind::PlainBurn {
            let run = plain_loop::train(
                model,
                scheduler,
                10.0,
                args.epochs,
                |epoch| Ok(train_loader.plan_epoch(&sampler, &PlanRequest::new(args.seed, epoch))?),
                &valid_batches,
                &mut metrics,
                &device,
                |row| println!("{}", epoch_line(row)),
            )?;
            return Ok(RunOutput {
                figures: run.figures,
                profile: None,
                baseline,
                time_to_first_step: run.time_to_first_step,
                steps_per_epoch,
                skipped_steps: None,
                loss_scale: None,
                stopped_early: None,
                lr_find_suggestion: lr_found,
                peak_lr,
                ema_min_ade: None,
            });
        }
        // kiln's trainer validates with the metrics measured on the device and read back once
        // per pass (the plain Burn loop above reads each batch back, as before).
        let mut metrics = DeviceTrajectoryMetrics::<B::InnerBackend>::from_metrics(metrics);
        let mut trainer = config.init(model, args.optimizer.init(), scheduler, device)?;
        let mut resumed_after = None;
        if let Some(dir) = &args.checkpoint_dir
            && let Some(latest) = latest_checkpoint(dir)?
        {
            let position = trainer.load_checkpoint(&latest)?;
            resumed_after = Some(trainer.counters().optimizer_steps);
            println!("resuming  from {} at {position}", latest.display());
            if position.epoch >= args.epochs {
                println!(
                    "resuming  that run finished all {} epochs: nothing left to train (a larger \
                     --epochs trains on)",
                    args.epochs
                );
            }
        }

        let progress = Arc::new(ProgressObserver::new().with_total_steps(total_steps));
        trainer.add_observer(Arc::clone(&progress));
        let logs = match &args.log_dir {
            Some(dir) => {
                let logs = logging::RunLogs::create(dir, args.log_every.max(1), resumed_after)?;
                trainer.add_observer(Arc::clone(&logs.csv));
                trainer.add_observer(Arc::clone(&logs.tensorboard));
                Some(logs)
            }
            None => None,
        };
        if let Some(patience) = args.early_stopping_patience {
            trainer.add_callback(
                EarlyStopping::new("valid/min_ade", Mode::Min)
                    .with_patience(patience)
                    .with_min_delta(args.early_stopping_min_delta),
            );
        }
        if let Some(dir) = &args.checkpoint_dir {
            // The best epoch by validation minADE@6, beside the newest ones.
            trainer.add_callback(BestCheckpoints::new(
                dir.join("best"),
                "valid/min_ade",
                Mode::Min,
                1,
            ));
        }
        let mut profiler = if args.no_profile {
            None
        } else {
            let profiler = profiling::Profiler::start(self.probe.clone())?;
            let (timer, meter) = profiler.observers();
            trainer.add_observer(timer);
            trainer.add_observer(meter);
            Some(profiler)
        };

        let mut figures = Vec::new();
        let mut ema_min_ade = None;
        let summary = trainer.fit_with(
            // Each epoch's plan, resumed at the trainer's position (mid-epoch after a restart).
            |position| {
                let request = PlanRequest::new(args.seed, position.epoch);
                train_loader.resume_epoch(&sampler, &request, position)
            },
            |trainer, epoch| {
                metrics.reset();
                let report = trainer.validate(valid_batches.iter().cloned(), &mut metrics)?;
                let train_loss = trainer.last_loss()?.unwrap_or(f64::NAN);
                let row = epoch_figures(epoch, train_loss, &report);
                trainer.log_metric("valid/min_ade", row.min_ade);
                trainer.log_metric("valid/min_fde", row.min_fde);
                trainer.log_metric("valid/miss_rate", row.miss_rate);
                metrics.reset();
                let ema_report =
                    trainer.validate_ema(valid_batches.iter().cloned(), &mut metrics)?;
                let ema_at_k = ema_report
                    .as_ref()
                    .and_then(|report| report.horizons[0].at(MODES))
                    .and_then(|top| top.min_ade);
                if let Some(min_ade) = ema_at_k {
                    trainer.log_metric("valid/ema_min_ade", min_ade);
                    ema_min_ade = Some(min_ade);
                }
                progress.suspend(|| println!("{}", epoch_line(&row)));
                figures.push(row);
                Ok(())
            },
        )?;
        progress.finish();
        if let Some(logs) = &logs {
            logs.finish()?;
        }
        if let Some(dir) = args.checkpoint_dir.as_ref().filter(|_| args.ema.is_some()) {
            let path = dir.join("ema.mpk");
            if trainer.save_ema_weights(&path)? {
                println!("ema       the averaged weights in {}", path.display());
            }
        }
        if let Some(epoch) = summary.stopped_early {
            println!(
                "stopped   early after epoch {epoch}: validation minADE@6 did not improve for {} epochs",
                args.early_stopping_patience.unwrap_or_default().max(1)
            );
        }
        let Some(mut profiler) = profiler.take() else {
            return Ok(RunOutput {
                figures,
                profile: None,
                baseline,
                time_to_first_step: summary.time_to_first_step,
                steps_per_epoch,
                skipped_steps: Some(summary.counters.skipped_steps),
                loss_scale: trainer.loss_scaler().map(|scaler| scaler.scale()),
                stopped_early: summary.stopped_early,
                lr_find_suggestion: lr_found,
                peak_lr,
                ema_min_ade,
            });
        };
        profiler.training_done();
        let diagnosis = if args.diagnose_steps > 0 {
            // Batches of epochs the run did not train on: one kept on the device, the rest
            // streamed by the loader.
            let open =
                |epoch| train_loader.plan_epoch(&sampler, &PlanRequest::new(args.seed, epoch));
            let cached = open(args.epochs)?
                .next()
                .context("the training set holds no whole batch")??;
            let next_batch =
                kiln_ml_examples::cached_batch::epoch_after_epoch(open, args.epochs + 1);
            Some(profiler.diagnose(&mut trainer, cached, next_batch, 4, args.diagnose_steps)?)
        } else {
            None
        };
        let profile = profiler.finish(diagnosis);
        let stats = train_loader.source().stats();
        println!(
            "cache     (train + valid) {} disk hits, {} misses, {} corrupt segments rebuilt, {:.1} MB read",
            stats.disk_hits,
            stats.misses,
            stats.corrupt_segments,
            stats.bytes_read as f64 / 1e6
        );
        if stats.failed_writes > 0 {
            println!(
                "warning   {} cache segments could not be written and were served uncached; last \
                 error: {}",
                stats.failed_writes,
                train_loader
                    .source()
                    .disk()
                    .last_write_error()
                    .unwrap_or_default()
            );
        }
        Ok(RunOutput {
            figures,
            profile: Some(profile),
            baseline,
            time_to_first_step: summary.time_to_first_step,
            steps_per_epoch,
            skipped_steps: Some(summary.counters.skipped_steps),
            loss_scale: trainer.loss_scaler().map(|scaler| scaler.scale()),
            stopped_early: summary.stopped_early,
            lr_find_suggestion: lr_found,
            peak_lr,
            ema_min_ade,
        })
    }
}

impl Args {
    /// Where the starting weights come from (`--seed`, `--host-weights`, `--perturb-*`).
    fn initial_weights(&self) -> initial_weights::InitialWeights {
        initial_weights::InitialWeights {
            seed: self.seed,
            on_host: self.host_weights,
            perturbation: self.perturb_weights.map(|scale| (scale, self.perturb_seed)),
        }
    }
}

/// What decides the dataset's rows: the flags that write it (and the generator's version,
/// bumped whenever `dataset::write_split` writes other rows for the same flags).
#[derive(serde::Serialize)]
struct DatasetSpec {
    generator: u32,
    files: u32,
    players: u64,
    valid_players: u64,
    row_group: usize,
    seed: u64,
}

/// The training and validation splits under `root`: written by the first run, reused by
/// later ones with the same data flags, refused for other flags (`--dir` keeps them).
fn prepare_data(args: &Args, root: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (train_dir, valid_dir) = (root.join("train"), root.join("valid"));
    let spec = DatasetSpec {
        generator: 1,
        files: args.files,
        players: args.players,
        valid_players: args.valid_players,
        row_group: args.row_group,
        seed: args.seed,
    };
    let started = Instant::now();
    let prepared = dataset_dir::reuse_or_write(root, &spec, &["train", "valid"], || {
        dataset::write_split(
            &train_dir,
            args.files,
            args.players,
            args.row_group,
            args.seed,
        )?;
        dataset::write_split(
            &valid_dir,
            4,
            args.valid_players,
            args.row_group,
            args.seed + 1,
        )?;
        Ok(())
    })?;
    let done = match prepared {
        Prepared::Reused => "reusing",
        Prepared::Written => "wrote",
    };
    println!(
        "dataset   {done} {} + {} players in {} ({:.2} s)",
        args.players,
        args.valid_players,
        root.display(),
        started.elapsed().as_secs_f64()
    );
    Ok((train_dir, valid_dir))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.files > 0 && args.batch > 0 && args.valid_batch > 0,
        "--files, --batch and --valid-batch must be at least 1"
    );
    ensure!(
        args.players >= u64::from(args.files) && args.players >= args.batch,
        "--players ({}) must be at least --files ({}) and --batch ({})",
        args.players,
        args.files,
        args.batch
    );
    ensure!(
        args.valid_players >= 4,
        "--valid-players must be at least 4"
    );
    ensure!(
        args.lr > 0.0 && args.lr <= 1.0,
        "--lr {} must be above 0 and at most 1 (the range of Burn's cosine schedule)",
        args.lr
    );
    // The timeline (profiled kiln runs only) goes beside the JSON, as .svg.
    let profiled = !args.no_profile && args.trainer == TrainerKind::Kiln;
    if let Some(json) = args.output.json.as_ref().filter(|_| profiled) {
        ensure!(
            json.with_extension("svg") != *json,
            "--json {} would be overwritten by the run's timeline, written beside it as .svg: \
             give a .json path",
            json.display()
        );
    }
    ensure!(
        args.trainer == TrainerKind::Kiln || args.max_queued_steps.is_none(),
        "--trainer plain-burn never waits for the device (--max-queued-steps is kiln-ml-train's)"
    );
    ensure!(
        args.trainer == TrainerKind::Kiln
            || (args.log_dir.is_none()
                && args.early_stopping_patience.is_none()
                && !args.lr_find
                && args.ema.is_none()),
        "--trainer plain-burn has no loggers, callbacks, LR finder or EMA (--log-dir, \
         --early-stopping-patience, --lr-find and --ema are kiln-ml-train's)"
    );
    ensure!(
        args.trainer == TrainerKind::Kiln || args.checkpoint_dir.is_none(),
        "--trainer plain-burn writes no checkpoints (--checkpoint-dir is kiln-ml-train's)"
    );
    ensure!(
        args.trainer == TrainerKind::Kiln || args.optimizer == OptimizerKind::Adam,
        "--trainer plain-burn uses Burn's Adam (--optimizer fused-adam is kiln-ml-train's)"
    );
    ensure!(
        args.trainer == TrainerKind::Kiln || args.precision == Precision::F32,
        "--trainer plain-burn trains in f32 only (mixed precision by hand is kiln-ml-train's job)"
    );
    let selection = args.device.select()?;
    println!("device    {selection}");
    if let Some(tuning) = kiln_ml::backend::GpuTuning::applied() {
        println!("kernels   {tuning}");
    }
    println!("precision {}", args.precision);
    println!(
        "trainer   {} ({})",
        args.trainer.name(),
        args.optimizer.name()
    );

    let temporary = tempfile::tempdir()?;
    let root = match (&args.dir, &args.checkpoint_dir) {
        (Some(dir), _) => dir.clone(),
        // A checkpoint resumes on the data it was trained on: kept beside it.
        (None, Some(checkpoints)) => checkpoints.join("data"),
        (None, None) => temporary.path().to_path_buf(),
    };
    let (train_dir, valid_dir) = prepare_data(&args, &root)?;
    let started = Instant::now();
    // Made on this thread, which trains: CubeCL keeps a memory pool per thread's stream.
    let probe = kiln_ml::profile::device_memory_probe(&selection);
    let RunOutput {
        figures,
        profile,
        baseline,
        time_to_first_step,
        steps_per_epoch,
        skipped_steps,
        loss_scale,
        stopped_early,
        lr_find_suggestion,
        peak_lr,
        ema_min_ade,
    } = selection.run(Quickstart {
        args: args.clone(),
        probe,
        train_dir,
        valid_dir,
        cache_dir: root.join("cache"),
    })?;
    let seconds = started.elapsed().as_secs_f64();
    println!("done in {seconds:.1} s");
    if let Some(skipped) = skipped_steps.filter(|skipped| *skipped > 0) {
        println!(
            "skipped   {skipped} optimizer steps with non-finite gradients (the loss scale backed \
             off; now {})",
            loss_scale.map_or_else(|| "-".to_owned(), |scale| scale.to_string())
        );
    }
    if let Some(first) = time_to_first_step {
        println!(
            "first step {:.2} s from the start of training to the end of its first step (kernel \
             compilation on a GPU)",
            first.as_secs_f64()
        );
    }
    let last = figures.last();
    // The share of training time spent waiting for the loader, over all epochs.
    let trained: f64 = figures.iter().map(|f| f.train_seconds).sum();
    let waited: f64 = figures
        .iter()
        .map(|f| f.train_seconds * f.data_wait_fraction)
        .sum();
    let data_wait_share = (trained > 0.0).then(|| waited / trained);
    if let (Some(last), Some(baseline_ade)) = (last, baseline.min_ade) {
        println!(
            "result    minADE@6 {:.3} m against the constant-velocity baseline's {:.3} m ({:+.0}%; the \
             model's most probable mode alone: {:.3} m); minFDE@6 {:.3} against {:.3}; MR@6 {:.1}% \
             against {:.1}%",
            last.min_ade,
            baseline_ade,
            100.0 * (last.min_ade / baseline_ade - 1.0),
            last.ade_top1,
            last.min_fde,
            baseline.min_fde.unwrap_or(f64::NAN),
            100.0 * last.miss_rate,
            100.0 * baseline.miss_rate.unwrap_or(f64::NAN)
        );
    }
    let step_ms = steady_step_ms(&figures, steps_per_epoch);
    if let Some(step_ms) = step_ms {
        println!(
            "steps     {step_ms:.3} ms a step after the first epoch ({}, data wait included)",
            args.trainer.name()
        );
    }
    let report = profile.as_ref().map(|profile| &profile.report);
    if let Some(phases) = profile.as_ref().and_then(|profile| profile.phases()) {
        print!("{}", phases.table());
    }
    if let Some(throughput) = report.and_then(|report| report.throughput.as_ref()) {
        println!(
            "throughput {:.0} samples/s, {:.1} steps/s over the last {} steps",
            throughput.samples_per_s, throughput.steps_per_s, throughput.window_steps
        );
    }
    if let Some(diagnosis) = report.and_then(|report| report.diagnosis.as_ref()) {
        println!(
            "verdict   {}: the loader reaches {:.0}% of the cached batch's {:.1} steps/s, \
             {:.0}% of its time waiting for data",
            diagnosis.verdict,
            100.0 * diagnosis.throughput_ratio,
            diagnosis.cached.steps_per_s,
            100.0 * diagnosis.real.data_wait_share
        );
        for warning in &diagnosis.warnings {
            println!("warning   {warning}");
        }
    }
    if let Some(path) = &args.output.json {
        let json = serde_json::json!({
            "device": selection.name(),
            "precision": args.precision.name(),
            "players": args.players,
            "files": args.files,
            "epochs": args.epochs,
            "batch": args.batch,
            "valid_batch": args.valid_batch,
            "seed": args.seed,
            "host_weights": args.host_weights,
            "perturb_weights": args.perturb_weights,
            "perturb_seed": args.perturb_weights.map(|_| args.perturb_seed),
            "min_ade": last.map(|f| f.min_ade),
            "min_fde": last.map(|f| f.min_fde),
            "miss_rate": last.map(|f| f.miss_rate),
            "baseline_min_ade": baseline.min_ade,
            "baseline_min_fde": baseline.min_fde,
            "baseline_miss_rate": baseline.miss_rate,
            "data_wait_share": data_wait_share,
            "seconds": seconds,
            "time_to_first_step_s": time_to_first_step.map(|first| first.as_secs_f64()),
            "trainer": args.trainer.name(),
            "optimizer": args.optimizer.name(),
            // The bound kiln's trainer ran with; none for the plain loop.
            "max_queued_steps": (args.trainer == TrainerKind::Kiln).then(|| {
                args.max_queued_steps
                    .unwrap_or(TrainerConfig::new().max_queued_steps)
            }),
            "skipped_steps": skipped_steps,
            "loss_scale": loss_scale,
            "stopped_early": stopped_early.is_some(),
            "stopped_after_epoch": stopped_early,
            "lr_find_suggestion": lr_find_suggestion,
            "peak_lr": peak_lr,
            "ema_min_ade": ema_min_ade,
            "best_min_ade": figures.iter().map(|f| f.min_ade).reduce(f64::min),
            "log_dir": args.log_dir,
            "step_ms": step_ms,
            "kernel_cache": kiln_ml::backend::GpuTuning::applied().map(|tuning| tuning.cache_dir()),
            "epochs_run": figures,
            "verdict": report.and_then(|report| report.diagnosis.as_ref()).map(|d| d.verdict),
            "timeline_svg": profile.as_ref().map(|_| path.with_extension("svg")),
            "profile": report,
        });
        if let Some(profile) = &profile {
            let svg = path.with_extension("svg");
            kiln_ml::profile::write_timeline_svg(
                &svg,
                "kiln quickstart",
                &profile.spans,
                &profile.samples,
            )?;
            println!("timeline  {}", svg.display());
        }
        args.output.write(&json)?;
    }
    Ok(())
}
