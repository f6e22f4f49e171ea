//! Where the starting weights come from. By default the device draws them with its own
//! generator, seeded with `--seed`. With `--host-weights` flex draws them on the host (the
//! CPU run's weights, bit for bit) and they are copied to the device, so runs on different
//! devices start from the same weights. `--perturb-weights EPS` then multiplies each weight by
//! `1 + EPS u`, u uniform in [-1, 1) from `--perturb-seed`: the winner-takes-all loss is
//! chaotic, and this samples how far apart runs from nearly the same start land
//! (docs/performance.md, "Why one bit ends as a different minADE").

use anyhow::Result;
use burn::backend::Flex;
use burn::module::{Module, ModuleMapper, Param};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::Forecaster;

/// How to start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InitialWeights {
    /// The seed of the weights' generator.
    pub seed: u64,
    /// Draw them with flex's generator on the host and copy them to the device.
    pub on_host: bool,
    /// Multiply each weight by `1 + scale u` (`None`: as drawn).
    pub perturbation: Option<(f64, u64)>,
}

impl InitialWeights {
    /// The model of `width`, on `device`, started as `self` says.
    pub fn model<B: Backend>(&self, width: usize, device: &B::Device) -> Result<Forecaster<B>> {
        let model = if self.on_host {
            let host = Default::default();
            Flex::seed(&host, self.seed);
            let drawn = Forecaster::<Flex>::new(width, &host);
            let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
            let bytes = Recorder::<Flex>::record(&recorder, drawn.into_record(), ())?;
            let record = Recorder::<B>::load(&recorder, bytes, device)?;
            Forecaster::<B>::new(width, device).load_record(record)
        } else {
            B::seed(device, self.seed);
            Forecaster::<B>::new(width, device)
        };
        let model = match self.perturbation {
            Some((scale, seed)) => model.map(&mut Perturb {
                scale,
                rng: ChaCha8Rng::seed_from_u64(seed),
            }),
            None => model,
        };
        // Drawn now, in one order: a clone made before (the range test's copy) would draw its
        // own weights first and change the model's.
        kiln_ml::train::materialize(&model);
        Ok(model)
    }
}

/// Multiplies every float parameter by `1 + scale u`, on the host, in visiting order.
struct Perturb {
    scale: f64,
    rng: ChaCha8Rng,
}

impl<B: Backend> ModuleMapper<B> for Perturb {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|tensor| {
            let (shape, device) = (tensor.shape(), tensor.device());
            // A new tensor from host values: trainable again only if the drawn one was.
            let trainable = tensor.is_require_grad();
            let values: Vec<f32> = tensor
                .into_data()
                .convert::<f32>()
                .into_vec()
                .expect("f32 values");
            let scaled: Vec<f32> = values
                .into_iter()
                .map(|value| {
                    let u: f64 = self.rng.random_range(-1.0..1.0);
                    (f64::from(value) * (1.0 + self.scale * u)) as f32
                })
                .collect();
            Tensor::from_data(TensorData::new(scaled, shape), &device).set_require_grad(trainable)
        })
    }
}
