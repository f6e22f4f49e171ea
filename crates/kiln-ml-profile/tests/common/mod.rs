//! The model and training steps the finder's test binaries share: kiln's real trainer on flex.

use burn::backend::Autodiff;
use burn::optim::AdamConfig;
use burn::tensor::backend::Backend;
use kiln_ml_testkit::{Mlp, MlpConfig, RegressionBatch, teacher_rows};
use kiln_ml_train::{Trainer, TrainerConfig};

/// The CPU backend with autodiff.
pub type Flex = Autodiff<burn::backend::Flex>;

/// 32 MiB: a few hundred samples of the wide MLP below fit.
pub const BUDGET: u64 = 32 * 1024 * 1024;

/// The wide MLP the finder sizes batches for.
pub fn model() -> Mlp<Flex> {
    let device = Default::default();
    Flex::seed(&device, 9);
    // Wide layers: each sample's activations and gradients take ~25 KiB, far above the heap's
    // noise, so the boundary is sharp.
    MlpConfig::new(4, &[1024, 1024], 1).init(&device)
}

/// `steps` full training steps (forward, backward, Adam) at `batch` rows.
pub fn train(model: Mlp<Flex>, batch: usize, steps: usize) -> Result<(), kiln_ml_train::Error> {
    let device = Default::default();
    let mut trainer = Trainer::new(
        model,
        AdamConfig::new().init(),
        1e-3,
        TrainerConfig::new(),
        device,
    )?;
    for step in 0..steps {
        let (inputs, targets) = teacher_rows(batch, step as u64);
        trainer.train_batch(RegressionBatch::from_rows(&inputs, &targets, &device))?;
    }
    trainer.last_loss().map(|_| ())
}
