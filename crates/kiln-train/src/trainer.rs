//! The `Trainer`: owns the model, optimizer, scheduler and the run's state.

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_core::{Observer, Position};
use rand_chacha::ChaCha8Rng;

use crate::observers::Observers;
use crate::window::Window;
use crate::{
    Autocast, Counters, DynamicLossScaler, Result, SkipMonitor, TrainStep, TrainerConfig,
    materialize, rng,
};

/// A training loop for any Burn model, optimizer and LR scheduler, with mixed precision,
/// gradient accumulation, global-norm clipping, observers and exact mid-epoch resume.
///
/// Drive it one micro-batch at a time from your own loop with
/// [`train_batch`](Self::train_batch) (and [`end_epoch`](Self::end_epoch) at each epoch's end),
/// or hand it the data with [`fit`](Self::fit). See the [crate docs](crate) for an example.
///
/// The master model and the optimizer state stay in f32. Per optimizer step the trainer does
/// exactly one device-to-host readback (the loss and the squared global gradient norm
/// together), which serves the loss report, the inf/NaN check and norm clipping.
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
    pub(crate) position: Position,
    pub(crate) epoch_started: bool,
    pub(crate) last_loss: Option<f64>,
    pub(crate) host_rng: ChaCha8Rng,
    pub(crate) observers: Observers,
}

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// A trainer at the start of epoch 0.
    ///
    /// Validates `config`, checks that the device supports the precision, seeds the backend
    /// with `config.seed`, and materializes the model's lazily initialized parameters (so the
    /// per-step low-precision copies share them).
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
            position: Position::start_of(0),
            epoch_started: false,
            last_loss: None,
            host_rng: rng::host_rng(config.seed),
            observers: Observers::new(config.sync_phase_timing),
            config,
            device,
        })
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

    /// Where the data stands: pass it to the sampler or loader to continue exactly here.
    pub fn position(&self) -> Position {
        self.position
    }

    /// The f16 loss scaler, when [`Precision::F16Mixed`](crate::Precision::F16Mixed) is on.
    pub fn loss_scaler(&self) -> Option<&DynamicLossScaler> {
        self.scaler.as_ref()
    }

    /// The loss of the last optimizer step.
    pub fn last_loss(&self) -> Option<f64> {
        self.last_loss
    }

    /// Micro-batches accumulated towards the next optimizer step.
    pub fn pending_micro_batches(&self) -> u32 {
        self.window.micro_batches
    }

    /// The trainer's host RNG (seeded from `config.seed`, saved in checkpoints): use it for
    /// data augmentation so a resumed run draws the same numbers.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.host_rng
    }
}
