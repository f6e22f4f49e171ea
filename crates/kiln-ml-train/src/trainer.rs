//! The `Trainer`: owns the model, optimizer, scheduler and the run's state.

use std::time::Duration;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Fingerprint, Observer, Position};
use rand_chacha::ChaCha8Rng;

use crate::callback::{Callback, EpochMetrics};
use crate::clipping::read_scalar;
use crate::observers::Observers;
use crate::precision_policy::CastPlan;
use crate::replica::Membership;
use crate::run_ahead::RunAhead;
use crate::skip_monitor::SkipMonitor;
use crate::window::Window;
use crate::{
    Autocast, Counters, DynamicLossScaler, Result, TrainStep, TrainerConfig, materialize, rng,
};

/// A training loop for any Burn model, optimizer and LR scheduler, with mixed precision,
/// gradient accumulation, global-norm clipping, observers and exact mid-epoch resume.
///
/// Hand it the data with [`fit`](Self::fit), or drive it one micro-batch at a time from your
/// own loop with [`train_batch`](Self::train_batch) (then
/// [`record_position`](Self::record_position) after each batch, and
/// [`end_epoch`](Self::end_epoch) at each epoch's end). See the [crate docs](crate) for an example.
///
/// The master model and the optimizer state stay in f32. An f32 or bf16 optimizer step reads
/// nothing back to the host by default, so the host queues the next step while the device
/// still runs this one (norm clipping computes its coefficient on the device); the loss is read
/// when asked for ([`last_loss`](Self::last_loss)) or every
/// [`read_loss_every`](crate::TrainerConfig::read_loss_every) steps. An f16 step reads the
/// loss and the squared global gradient norm back together, once, for the loss scaler's
/// inf/NaN check. [`Counters::readbacks`](crate::Counters::readbacks) counts them.
pub struct Trainer<B: AutodiffBackend, M, O, S> {
    /// Always `Some` between calls; moved out only while the optimizer consumes it.
    pub(crate) model: Option<M>,
    pub(crate) optim: O,
    pub(crate) scheduler: S,
    pub(crate) config: TrainerConfig,
    pub(crate) device: B::Device,
    pub(crate) autocast: Autocast,
    pub(crate) scaler: Option<DynamicLossScaler>,
    pub(crate) monitor: SkipMonitor,
    pub(crate) window: Window<B>,
    pub(crate) counters: Counters,
    /// The epoch being trained.
    pub(crate) epoch: u64,
    /// Where the data stands, as the data reported it: within `epoch`, or the start of the
    /// next epoch once its data ran out (before [`end_epoch`](Self::end_epoch)).
    pub(crate) position: Position,
    /// The identity of the data stream the position counts in, as the data last reported it.
    pub(crate) data_key: Option<Fingerprint>,
    /// Set by `load_checkpoint`: the next epoch `fit` opens must be the saved stream.
    pub(crate) check_data_key: bool,
    pub(crate) epoch_started: bool,
    /// The optimizer step of the last checkpoint `fit` wrote into the configured directory.
    pub(crate) last_scheduled_checkpoint: Option<u64>,
    /// The step of the checkpoint loaded, until `fit` first writes into the configured
    /// directory (which sets aside that directory's later checkpoints first).
    pub(crate) resumed_from_step: Option<u64>,
    /// The checksum of the last checkpoint loaded: under data parallelism `fit` checks that
    /// every replica starts from the same one.
    pub(crate) loaded_checkpoint: Option<Fingerprint>,
    pub(crate) last_loss: Option<LastLoss<B>>,
    /// Optimizer steps queued since the host last waited for the device, with the reads that
    /// tell when each ended.
    pub(crate) run_ahead: RunAhead,
    /// What the per-step low-precision copy keeps in f32; `None` in f32 mode.
    pub(crate) cast_plan: Option<CastPlan>,
    pub(crate) host_rng: ChaCha8Rng,
    pub(crate) observers: Observers,
    /// The data-parallel replica this trainer is, once it [joined](Self::join) one.
    pub(crate) membership: Option<Membership>,
    /// The last `fit`'s time from its call to the end of its first optimizer step.
    pub(crate) time_to_first_step: Option<Duration>,
    /// Run by `fit_with` after each epoch.
    pub(crate) callbacks: Vec<Box<dyn Callback>>,
    /// The stateful callbacks' states, as checkpoints save them.
    pub(crate) callback_states: crate::callback_states::CallbackStates,
    /// What the current epoch logged with `log_metric`.
    pub(crate) epoch_metrics: EpochMetrics,
    /// The moving average of the weights, once the first update made it.
    pub(crate) ema: Option<M>,
    /// Whether the optimizer takes the trainer's step hints (a kiln fused optimizer), once a
    /// step told (see `step_hints`).
    pub(crate) fused_optimizer: Option<bool>,
    /// Changes whenever the model changes other than through an optimizer step, so a fused
    /// optimizer does not reuse parameter buckets of an older model; unique in the process
    /// (`step_hints::fresh_generation`), so neither those of another trainer's.
    pub(crate) model_generation: u64,
}

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// A trainer at the start of epoch 0; the same as
    /// [`TrainerConfig::init`](crate::TrainerConfig::init), argument for argument.
    ///
    /// Validates `config`, checks that the device supports the precision, seeds the backend
    /// with `config.seed`, and materializes the model's lazily initialized parameters (so the
    /// per-step low-precision copies share them). A model that holds one parameter in two
    /// places (a module cloned into two fields) is refused with [`Error::TiedParameters`](crate::Error::TiedParameters).
    pub fn new(
        model: M,
        optim: O,
        scheduler: S,
        config: TrainerConfig,
        device: B::Device,
    ) -> Result<Self> {
        config.validate()?;
        config.precision.check_supported::<B>(&device)?;
        B::seed(&device, config.seed);
        materialize(&model);
        if let Some((id, first, second)) = crate::tied_params::first_tied_param(&model) {
            return Err(crate::Error::TiedParameters {
                id: id.to_string(),
                first,
                second,
            });
        }
        let cast_plan = config
            .precision
            .is_mixed()
            .then(|| {
                CastPlan::new(
                    &model,
                    config.precision_policy.clone(),
                    config.precision.compute_dtype(),
                )
            })
            .transpose()?;
        let scaler = if config.precision.needs_loss_scaling() {
            Some(config.loss_scaler.init()?)
        } else {
            None
        };
        Ok(Self {
            model: Some(model),
            optim,
            scheduler,
            autocast: Autocast::new(config.precision),
            scaler,
            monitor: SkipMonitor::new(config.skip_warning),
            window: Window::default(),
            counters: Counters::default(),
            epoch: 0,
            position: Position::start_of(0),
            data_key: None,
            check_data_key: false,
            epoch_started: false,
            last_scheduled_checkpoint: None,
            resumed_from_step: None,
            loaded_checkpoint: None,
            last_loss: None,
            run_ahead: RunAhead::new(),
            cast_plan,
            host_rng: rng::host_rng(config.seed),
            observers: Observers::new(config.sync_phase_timing),
            membership: None,
            time_to_first_step: None,
            callbacks: Vec::new(),
            callback_states: Default::default(),
            epoch_metrics: EpochMetrics::default(),
            ema: None,
            fused_optimizer: None,
            model_generation: crate::step_hints::fresh_generation(),
            config,
            device,
        })
    }

    /// Adds a callback; [`fit_with`](Self::fit_with) runs it after every epoch, in the order
    /// added, those that [keep checkpoints](crate::Callback::keeps_checkpoints) of their own
    /// after all the others.
    pub fn add_callback(&mut self, callback: impl Callback + 'static) {
        self.callbacks.push(Box::new(callback));
    }

    /// Adds a callback, builder style.
    pub fn with_callback(mut self, callback: impl Callback + 'static) -> Self {
        self.add_callback(callback);
        self
    }

    /// Logs a named figure of the epoch being trained or just ended (a validation metric, say
    /// `valid/min_ade`, in `fit_with`'s end-of-epoch closure):
    /// callbacks read it at the epoch's end, and observers (loggers) get it as
    /// [`Event::Metric`](kiln_ml_core::Event::Metric).
    pub fn log_metric(&mut self, name: &str, value: f64) {
        self.epoch_metrics.insert(name, value);
        self.observers.emit(&kiln_ml_core::Event::Metric {
            name: name.to_owned(),
            value,
            epoch: self.epoch_metrics.epoch(),
            step: self.counters.optimizer_steps,
        });
    }

    /// The moving average of the weights ([`TrainerConfig::ema`](crate::TrainerConfig::ema)),
    /// once its first update ran: no autodiff graph, its parameters leaves as trainable as the
    /// model's (a new trainer can fine-tune a clone); save it with Burn's recorders or
    /// validate it with [`validate_ema`](Self::validate_ema).
    pub fn ema_model(&self) -> Option<&M> {
        self.ema.as_ref()
    }

    /// After an applied optimizer step: moves the average, every `every_steps` applied steps
    /// (the first update starts it from the weights).
    pub(crate) fn update_ema(&mut self) {
        let Some(config) = self.config.ema else {
            return;
        };
        if !self
            .counters
            .applied_steps
            .is_multiple_of(config.every_steps)
        {
            return;
        }
        let model = self
            .model
            .as_ref()
            .expect("the model is present between steps");
        self.ema = Some(match self.ema.take() {
            Some(ema) => crate::ema::ema_update(ema, model, config.decay),
            None => crate::ema::ema_start(model),
        });
    }

    /// What the current epoch logged so far with [`log_metric`](Self::log_metric).
    pub fn epoch_metrics(&self) -> &EpochMetrics {
        &self.epoch_metrics
    }

    /// Adds an observer; it receives every event from now on.
    pub fn add_observer(&mut self, observer: impl Observer + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// Adds an observer, builder style.
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.add_observer(observer);
        self
    }

    /// The master model (f32).
    pub fn model(&self) -> &M {
        self.model
            .as_ref()
            .expect("the model is only moved out during an optimizer step")
    }

    /// Takes the trained model.
    pub fn into_model(self) -> M {
        self.model
            .expect("the model is only moved out during an optimizer step")
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &O {
        &self.optim
    }

    /// The LR scheduler.
    pub fn scheduler(&self) -> &S {
        &self.scheduler
    }

    /// The settings.
    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    /// The device the trainer runs on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The cast policy step functions receive.
    pub fn autocast(&self) -> Autocast {
        self.autocast
    }

    /// How far the run has come.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Where the data stands, as the data last reported it: pass it to the sampler or loader
    /// to continue exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// The epoch being trained, counted from zero.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The f16 loss scaler, when [`Precision::F16Mixed`](crate::Precision::F16Mixed) is on.
    pub fn loss_scaler(&self) -> Option<&DynamicLossScaler> {
        self.scaler.as_ref()
    }

    /// The loss of the last optimizer step, read back from the device if no readback has
    /// brought it yet (one readback, counted in [`Counters::readbacks`](Counters::readbacks)).
    pub fn last_loss(&mut self) -> Result<Option<f64>> {
        let value = match self.last_loss.take() {
            None => return Ok(None),
            Some(LastLoss::Read(value)) => value,
            Some(LastLoss::OnDevice(tensor)) => {
                self.counters.readbacks += 1;
                read_scalar(tensor, "the readback of the last loss")?
            }
        };
        self.last_loss = Some(LastLoss::Read(value));
        Ok(Some(value))
    }

    /// The time from the last [`fit`](Self::fit)'s call to the end of its first optimizer step
    /// (kernel compilation and autotuning included, on a GPU backend); `None` before one ran.
    pub fn time_to_first_step(&self) -> Option<Duration> {
        self.time_to_first_step
    }

    /// Micro-batches accumulated towards the next optimizer step.
    pub fn pending_micro_batches(&self) -> u32 {
        self.window.micro_batches
    }

    /// The trainer's host RNG (seeded from `config.seed`, saved in checkpoints): use it for
    /// data augmentation so a resumed run draws the same numbers. Under data parallelism each
    /// replica draws from its own stream (the rank's; rank 0's is a single trainer's), so the
    /// replicas do not augment their batches alike; a resume gives each its stream again.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.host_rng
    }
}

impl TrainerConfig {
    /// A trainer with these settings, at the start of epoch 0, for `model` trained with
    /// `optim` and `scheduler` on `device` (see [`Trainer::new`] for what it checks).
    pub fn init<B, M, O, S>(
        self,
        model: M,
        optim: O,
        scheduler: S,
        device: B::Device,
    ) -> Result<Trainer<B, M, O, S>>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B> + TrainStep<B>,
        O: Optimizer<M, B>,
        S: LrScheduler,
    {
        Trainer::new(model, optim, scheduler, self, device)
    }
}

/// The last optimizer step's loss: on the host once read, on the device until then.
pub(crate) enum LastLoss<B: AutodiffBackend> {
    /// Read back.
    Read(f64),
    /// Not read back yet (the window's mean loss, f32).
    OnDevice(burn::tensor::Tensor<B::InnerBackend, 1>),
}
