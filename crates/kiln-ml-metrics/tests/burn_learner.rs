//! The burn-train adapter inside Burn's own `Learner` (feature `burn-train`): a set of kiln
//! dashboard metrics registered together measures each validation batch once.
#![cfg(feature = "burn-train")]

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::constant::ConstantLr;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn::train::metric::Adaptor;
use burn::train::{InferenceStep, ItemLazy, Learner, SupervisedTraining, TrainOutput, TrainStep};
use kiln_ml_metrics::{
    BurnTrajectoryMetric, MetricsConfig, ReportedValue, TensorTrajectoryBatch,
    TrajectoryMetricInput,
};

const MODES: usize = 2;
const STEPS: usize = 3;

/// Two modes of a 3-step future from 2 input features.
#[derive(Module, Debug)]
struct Forecaster<B: Backend> {
    head: Linear<B>,
}

#[derive(Debug, Clone)]
struct Batch<B: Backend> {
    inputs: Tensor<B, 2>,
    future: Tensor<B, 3>,
}

#[derive(Debug, Clone, Copy)]
struct Rows;

impl<B: Backend> Batcher<B, [f32; 2], Batch<B>> for Rows {
    fn batch(&self, items: Vec<[f32; 2]>, device: &B::Device) -> Batch<B> {
        let rows = items.len();
        let inputs: Vec<f32> = items.iter().flatten().copied().collect();
        // The truth walks from the origin along the inputs.
        let future: Vec<f32> = items
            .iter()
            .flat_map(|[x, y]| (1..=STEPS).flat_map(move |t| [x * t as f32, y * t as f32]))
            .collect();
        Batch {
            inputs: Tensor::from_data(TensorData::new(inputs, [rows, 2]), device),
            future: Tensor::from_data(TensorData::new(future, [rows, STEPS, 2]), device),
        }
    }
}

/// The forecasts and the truth of a batch.
struct Forecasts<B: Backend> {
    predictions: Tensor<B, 4>,
    future: Tensor<B, 3>,
}

impl<B: Backend> ItemLazy for Forecasts<B> {
    type ItemSync = Self;
    fn sync(self) -> Self {
        self
    }
}

impl<B: Backend> Adaptor<TrajectoryMetricInput<B>> for Forecasts<B> {
    fn adapt(&self) -> TrajectoryMetricInput<B> {
        let batch = TensorTrajectoryBatch::new(self.predictions.clone(), self.future.clone())
            .expect("shapes match by construction");
        TrajectoryMetricInput::new(batch)
    }
}

impl<B: Backend> Forecaster<B> {
    fn forward(&self, batch: &Batch<B>) -> Tensor<B, 4> {
        let rows = batch.inputs.dims()[0];
        self.head
            .forward(batch.inputs.clone())
            .reshape([rows, MODES, STEPS, 2])
    }
}

impl<B: AutodiffBackend> TrainStep for Forecaster<B> {
    type Input = Batch<B>;
    type Output = ();

    fn step(&self, batch: Batch<B>) -> TrainOutput<()> {
        let predictions = self.forward(&batch);
        let loss = (predictions - batch.future.unsqueeze_dim::<4>(1))
            .powi_scalar(2)
            .mean();
        TrainOutput::new(self, loss.backward(), ())
    }
}

impl<B: Backend> InferenceStep for Forecaster<B> {
    type Input = Batch<B>;
    type Output = Forecasts<B>;

    fn step(&self, batch: Batch<B>) -> Forecasts<B> {
        Forecasts {
            predictions: self.forward(&batch),
            future: batch.future,
        }
    }
}

/// Argoverse 2's rules at K = 1 and 2 (the model's modes).
fn config() -> MetricsConfig {
    let mut config = MetricsConfig::argoverse2();
    config.top_k = vec![1, MODES];
    config
}

#[test]
fn metrics_registered_together_in_a_learner_measure_each_batch_once() {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let rows: Vec<[f32; 2]> = (0..48)
        .map(|i| [(i % 7) as f32 * 0.5, (i % 5) as f32 * 0.25])
        .collect();
    let train = DataLoaderBuilder::new(Rows)
        .batch_size(8)
        .build(InMemDataset::new(rows.clone()));
    // 4 validation batches a run.
    let valid = DataLoaderBuilder::<Flex, _, _>::new(Rows)
        .batch_size(12)
        .build(InMemDataset::new(rows));
    let [min_ade, min_fde, miss] = BurnTrajectoryMetric::<Flex>::set(
        config(),
        [
            ReportedValue::MinAde,
            ReportedValue::MinFde,
            ReportedValue::MissRate,
        ],
    )
    .unwrap();
    let watched = min_ade.clone();
    let single = BurnTrajectoryMetric::<Flex>::new(config(), ReportedValue::Fde).unwrap();
    let watched_single = single.clone();
    let dir = tempfile::tempdir().unwrap();
    let model = Forecaster::<B> {
        head: LinearConfig::new(2, MODES * STEPS * 2).init(&device),
    };
    let epochs = 2;
    SupervisedTraining::new(dir.path(), train, valid)
        .metric_valid_numeric(min_ade)
        .metric_valid_numeric(min_fde)
        .metric_valid_numeric(miss)
        .metric_valid_numeric(single)
        .num_epochs(epochs)
        .launch(Learner::new(
            model,
            SgdConfig::new().init(),
            ConstantLr::new(0.01),
        ));
    // Three metrics, 4 batches an epoch, 2 epochs: 8 measurements, not 24.
    assert_eq!(watched.batches_measured(), 8);
    assert_eq!(watched_single.batches_measured(), 8);
}
