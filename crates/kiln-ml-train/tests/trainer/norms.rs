//! Mixed precision with normalization layers: the master's weights and running statistics stay
//! f32, and the trained model runs in plain f32 outside kiln.

use burn::module::{AutodiffModule, Module};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{
    BatchNorm, BatchNormConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig, LinearLayout,
    Relu,
};
use burn::optim::AdamConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};
use kiln_ml_testkit::MeanMetric;
use kiln_ml_train::{
    Autocast, EmaConfig, Error, InferenceStep, LrFinder, Precision, PrecisionPolicy, StepOutput,
    TrainStep, TrainerConfig,
};

use crate::common::{self, Batch, INPUTS};

/// Linear → BatchNorm → ReLU → LayerNorm → Linear.
#[derive(Module, Debug)]
pub struct NormMlp<B: Backend> {
    input: Linear<B>,
    batch_norm: BatchNorm<B>,
    layer_norm: LayerNorm<B>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> NormMlp<B> {
    fn new(device: &B::Device) -> Self {
        Self::with(device, 1, LinearLayout::Row)
    }

    /// With `outputs` outputs (another shape of the last layer, for checkpoint mismatches)
    /// and linear layers stored in `layout` (`Col` transposes through Burn's load/save hooks).
    fn with(device: &B::Device, outputs: usize, layout: LinearLayout) -> Self {
        let linear = |inputs, outputs| {
            LinearConfig::new(inputs, outputs)
                .with_layout(layout)
                .init(device)
        };
        let model = Self {
            input: linear(INPUTS, 8),
            batch_norm: BatchNormConfig::new(8).init(device),
            layer_norm: LayerNormConfig::new(8).init(device),
            output: linear(8, outputs),
            activation: Relu::new(),
        };
        kiln_ml_train::materialize(&model);
        model
    }

    /// The forward pass as kiln runs it: the norm layers through `keep_f32`.
    fn forward(&self, inputs: Tensor<B, 2>, autocast: &Autocast) -> Tensor<B, 2> {
        let x = self.input.forward(inputs);
        let x = autocast.keep_f32(x, |x| self.batch_norm.forward(x));
        let x = self.activation.forward(x);
        let x = autocast.keep_f32(x, |x| self.layer_norm.forward(x));
        self.output.forward(x)
    }

    /// The same network as a user calls it outside kiln: plain Burn, no casts.
    fn plain_forward(&self, inputs: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self.batch_norm.forward(self.input.forward(inputs));
        let x = self.layer_norm.forward(self.activation.forward(x));
        self.output.forward(x)
    }
}

impl<B: AutodiffBackend> TrainStep<B> for NormMlp<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs), autocast));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
        StepOutput::new(loss, ())
    }
}

/// Validation hands back each sample's squared error, computed the way training does it.
impl<B: Backend> InferenceStep<B> for NormMlp<B> {
    type Input = Batch<B>;
    type Output = Vec<f64>;

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> Vec<f64> {
        let predictions = autocast.full(self.forward(autocast.input(batch.inputs), autocast));
        let errors = (predictions - batch.targets).powi_scalar(2);
        errors.into_data().iter::<f64>().collect()
    }
}

/// The same network calling its norm layers directly, as if `keep_f32` were forgotten.
#[derive(Module, Debug)]
pub struct CarelessNormMlp<B: Backend> {
    inner: NormMlp<B>,
}

impl<B: AutodiffBackend> TrainStep<B> for CarelessNormMlp<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>, autocast: &Autocast) -> StepOutput<B, ()> {
        let predictions = autocast.full(self.inner.plain_forward(autocast.input(batch.inputs)));
        let loss = MseLoss::new().forward(predictions, batch.targets, Reduction::Mean);
        StepOutput::new(loss, ())
    }
}

fn config(precision: Precision) -> TrainerConfig {
    TrainerConfig::new()
        .with_precision(precision)
        .with_num_epochs(2)
}

fn dtypes<B: Backend>(model: &NormMlp<B>) -> Vec<DType> {
    vec![
        model.input.weight.val().dtype(),
        model.batch_norm.gamma.val().dtype(),
        model.batch_norm.running_mean.value().dtype(),
        model.batch_norm.running_var.value().dtype(),
        model.layer_norm.gamma.val().dtype(),
        model.output.weight.val().dtype(),
    ]
}

/// f16 and bf16 (where the device has them) train a BatchNorm/LayerNorm model whose master
/// stays f32 throughout, running statistics included, and whose trained weights run in plain
/// f32. A second trainer from a clone of the same model (clones share running statistics)
/// trains in the other precision without a dtype clash. A precision the device lacks is
/// refused by `Trainer::new`, naming the device.
fn norm_layers_keep_an_f32_master<B: AutodiffBackend>(device: B::Device) {
    let initial = NormMlp::<B>::new(&device);
    let batches = common::batches::<B>(6, 8, 4, &device);
    let mut trained = 0;
    for precision in [Precision::F16Mixed, Precision::Bf16Mixed] {
        if let Err(reason) = precision.check_supported::<B>(&device) {
            let refused = common::adam_trainer(initial.clone(), 1e-2, config(precision), &device);
            let error = refused.err().expect("refused");
            assert!(
                matches!(error, Error::UnsupportedPrecision { .. }),
                "{error}"
            );
            assert!(
                error.to_string().contains(&format!("{device:?}")),
                "{error}"
            );
            eprintln!("{precision} unsupported here: {reason}");
            continue;
        }
        let running_before = initial.batch_norm.running_var.value().into_data();
        let mut trainer =
            common::adam_trainer(initial.clone(), 1e-2, config(precision), &device).unwrap();
        let summary = trainer.fit(|p| common::plain(batches.clone(), p)).unwrap();
        assert!(summary.last_loss.unwrap().is_finite(), "{precision}");
        // Validation casts with the training plan: norms stay f32, so `keep_f32` matches.
        let valid = common::batches::<B::InnerBackend>(2, 8, 5, &device);
        let error = trainer
            .validate(valid, &mut MeanMetric::default())
            .unwrap()
            .unwrap();
        assert!(error.is_finite(), "{precision}: validation error {error}");
        let model = trainer.into_model();
        assert!(
            dtypes(&model).iter().all(|dtype| *dtype == DType::F32),
            "{precision}: the master is {:?}",
            dtypes(&model)
        );
        assert_ne!(
            model.batch_norm.running_var.value().into_data(),
            running_before,
            "{precision}: the running statistics were not updated"
        );
        // Plain Burn, f32 inputs, no autodiff: what a user does with the trained model.
        let inference = model.valid();
        let inputs = common::batches::<B::InnerBackend>(1, 8, 9, &device)
            .remove(0)
            .inputs;
        let outputs = inference.plain_forward(inputs);
        assert_eq!(outputs.dtype(), DType::F32);
        assert!(
            outputs
                .into_data()
                .iter::<f32>()
                .all(|value| value.is_finite())
        );
        trained += 1;
    }
    assert!(trained >= 1, "every device here runs f16 or bf16");
}

/// With the norm rule off, the running statistics are still found and kept f32.
fn running_statistics_stay_f32_without_the_norm_rule<B: AutodiffBackend>(device: B::Device) {
    let initial = NormMlp::<B>::new(&device);
    let precision = Precision::F16Mixed;
    if precision.check_supported::<B>(&device).is_err() {
        return;
    }
    let policy = PrecisionPolicy {
        keep_norms_f32: false,
        keep_f32: vec!["layer_norm".to_owned()],
    };
    let mut trainer = common::adam_trainer(
        initial.clone(),
        1e-2,
        TrainerConfig::new()
            .with_precision(precision)
            .with_precision_policy(policy),
        &device,
    )
    .unwrap();
    for batch in common::batches::<B>(3, 8, 4, &device) {
        trainer.train_batch(batch).unwrap();
    }
    assert!(
        dtypes(trainer.model())
            .iter()
            .all(|dtype| *dtype == DType::F32)
    );
}

/// Forgetting `keep_f32` is an error that names the fix, not a panic deep inside Burn.
fn a_norm_without_keep_f32_is_a_named_error<B: AutodiffBackend>(device: B::Device) {
    let precision = Precision::F16Mixed;
    if precision.check_supported::<B>(&device).is_err() {
        return;
    }
    let mut trainer = common::adam_trainer(
        CarelessNormMlp {
            inner: NormMlp::<B>::new(&device),
        },
        1e-2,
        TrainerConfig::new().with_precision(precision),
        &device,
    )
    .unwrap();
    let batch = common::batches::<B>(1, 8, 4, &device).remove(0);
    let error = trainer.train_batch(batch).expect_err("a dtype clash");
    assert!(
        matches!(error, Error::ForwardPanicked { step: 1, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("keep_f32"), "{error}");
}

/// The BatchNorm running variance, synced (Burn keeps a thread's last update aside).
fn running_var<B: Backend>(model: &NormMlp<B>) -> Vec<f32> {
    model
        .batch_norm
        .running_var
        .value_sync()
        .into_data()
        .to_vec()
        .unwrap()
}

/// The moving average keeps running statistics of its own. A Burn clone would share the
/// master's, so the average's statistics would be the master's, and each update would write
/// a blend into the master's in place.
fn the_average_keeps_running_statistics_of_its_own<B: AutodiffBackend>(device: B::Device) {
    let initial = NormMlp::<B>::new(&device);
    let trainer_of = |ema: Option<EmaConfig>| {
        common::adam_trainer(
            kiln_ml_train::independent_copy(&initial),
            1e-2,
            TrainerConfig::new().with_ema(ema),
            &device,
        )
        .unwrap()
    };
    // A decay this close to 1 keeps the average at the first step's values, to 1e-5.
    let mut trainer = trainer_of(Some(EmaConfig::new(0.99999)));
    let mut plain = trainer_of(None);
    let mut batches = common::batches::<B>(4, 8, 4, &device).into_iter();
    let first = batches.next().unwrap();
    trainer.train_batch(first.clone()).unwrap();
    plain.train_batch(first).unwrap();
    let started = running_var(trainer.model());
    assert_eq!(running_var(trainer.ema_model().unwrap()), started);
    for batch in batches {
        trainer.train_batch(batch.clone()).unwrap();
        plain.train_batch(batch).unwrap();
    }
    let master = running_var(trainer.model());
    assert!(common::max_abs_diff(&master, &started) > 1e-3, "{master:?}");
    let average = running_var(trainer.ema_model().unwrap());
    assert!(
        common::max_abs_diff(&average, &started) < 1e-4,
        "the average's statistics moved with the master's: {average:?}, started at {started:?}"
    );
    // Keeping the average leaves the master's statistics exactly as training made them.
    assert_eq!(master, running_var(plain.model()));
}

/// A checkpoint refused for its shapes leaves the live model's running statistics as they
/// were (loading writes running statistics in place, into every clone that shares them).
fn a_refused_checkpoint_leaves_the_running_statistics_alone<B: AutodiffBackend>(device: B::Device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.kiln");
    let wide = common::adam_trainer(
        NormMlp::<B>::with(&device, 2, LinearLayout::Row),
        1e-2,
        TrainerConfig::new(),
        &device,
    )
    .unwrap();
    wide.save_checkpoint(&path).unwrap();

    let mut trainer = common::adam_trainer(
        NormMlp::<B>::new(&device),
        1e-2,
        TrainerConfig::new(),
        &device,
    )
    .unwrap();
    for batch in common::batches::<B>(3, 8, 4, &device) {
        trainer.train_batch(batch).unwrap();
    }
    let trained = running_var(trainer.model());
    assert_ne!(trained, running_var(wide.model()));
    let error = trainer.load_checkpoint(&path).expect_err("other shapes");
    assert!(matches!(error, Error::CheckpointMismatch { .. }), "{error}");
    assert_eq!(running_var(trainer.model()), trained);
}

/// The range test trains a copy: the caller's clone keeps its running statistics, although
/// Burn clones share them.
fn the_range_test_leaves_the_callers_running_statistics_alone<B: AutodiffBackend>(
    device: B::Device,
) {
    let model = NormMlp::<B>::new(&device);
    let before = running_var(&model);
    let finding = LrFinder::new(1e-4, 1.0, 8)
        .run(
            model.clone(),
            AdamConfig::new().init(),
            TrainerConfig::new(),
            device.clone(),
            common::batches::<B>(8, 8, 4, &device)
                .into_iter()
                .map(Ok::<_, std::io::Error>),
        )
        .unwrap();
    assert!(!finding.losses.is_empty());
    assert_eq!(running_var(&model), before);
}

/// With decay 0 the average is the model at each update, running statistics included: they
/// are read after the step's own update, not one step late.
fn the_average_reads_the_running_statistics_of_this_step<B: AutodiffBackend>(device: B::Device) {
    let mut trainer = common::adam_trainer(
        NormMlp::<B>::new(&device),
        1e-2,
        TrainerConfig::new().with_ema(Some(EmaConfig::new(0.0))),
        &device,
    )
    .unwrap();
    for batch in common::batches::<B>(3, 8, 4, &device) {
        trainer.train_batch(batch).unwrap();
        assert_eq!(
            running_var(trainer.ema_model().unwrap()),
            running_var(trainer.model())
        );
    }
}

/// Column-major linear layers transpose their weights through Burn's load and save hooks: a
/// checkpoint loads back, and the average's exported weights load into a plain model, as
/// the copies kiln makes keep those hooks.
fn column_major_layers_survive_a_checkpoint_and_the_average<B: AutodiffBackend>(device: B::Device) {
    let column_major = || NormMlp::<B>::with(&device, 1, LinearLayout::Col);
    let trainer_of = |model| {
        common::adam_trainer(
            model,
            1e-2,
            TrainerConfig::new().with_ema(Some(EmaConfig::new(0.5))),
            &device,
        )
        .unwrap()
    };
    let mut trainer = trainer_of(column_major());
    for batch in common::batches::<B>(3, 8, 4, &device) {
        trainer.train_batch(batch).unwrap();
    }
    let weights = |model: &NormMlp<B>| -> Vec<f32> {
        let mut values: Vec<f32> = model.input.weight.val().into_data().to_vec().unwrap();
        values.extend(
            model
                .output
                .weight
                .val()
                .into_data()
                .to_vec::<f32>()
                .unwrap(),
        );
        values
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("col.kiln");
    trainer.save_checkpoint(&path).unwrap();
    let mut resumed = trainer_of(column_major());
    resumed.load_checkpoint(&path).unwrap();
    assert_eq!(weights(resumed.model()), weights(trainer.model()));
    assert_eq!(
        weights(resumed.ema_model().unwrap()),
        weights(trainer.ema_model().unwrap())
    );

    let exported = dir.path().join("ema.mpk");
    assert!(resumed.save_ema_weights(&exported).unwrap());
    let recorder = burn::record::NamedMpkFileRecorder::<burn::record::FullPrecisionSettings>::new();
    let plain = column_major()
        .load_file(dir.path().join("ema"), &recorder, &device)
        .unwrap();
    assert_eq!(weights(&plain), weights(trainer.ema_model().unwrap()));
}

crate::backend_tests!(
    the_average_reads_the_running_statistics_of_this_step,
    column_major_layers_survive_a_checkpoint_and_the_average,
    norm_layers_keep_an_f32_master,
    running_statistics_stay_f32_without_the_norm_rule,
    a_norm_without_keep_f32_is_a_named_error,
    the_average_keeps_running_statistics_of_its_own,
    a_refused_checkpoint_leaves_the_running_statistics_alone,
    the_range_test_leaves_the_callers_running_statistics_alone,
);
