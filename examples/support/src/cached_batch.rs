//! The cached-batch test on kiln's trainer, shared by the `diagnose` example and the quickstart:
//! steps on one batch kept on the device against steps on batches from the real loader.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::profile::StepRun;
use kiln_ml::profile::{Bottleneck, Diagnosis};
use kiln_ml::train::{TrainStep, Trainer};

/// Runs `bottleneck` (its steps, thresholds and utilization source set) with `trainer`:
/// training steps on `cached` against training steps on `next_batch()`, whose time is the data
/// wait. Each step reads its loss back, which waits for the device, so a step's wall time is
/// its own.
pub fn diagnose<B, M, O, S>(
    bottleneck: Bottleneck<'_>,
    trainer: &mut Trainer<B, M, O, S>,
    cached: M::Input,
    mut next_batch: impl FnMut() -> anyhow::Result<M::Input>,
) -> anyhow::Result<Diagnosis>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    M::Input: Clone,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    // Both closures train, one at a time.
    let trainer = RefCell::new(trainer);
    let step = |batch: M::Input, data_wait: Duration| -> anyhow::Result<StepRun> {
        let mut trainer = trainer.borrow_mut();
        trainer.train_batch(batch)?;
        let loss = trainer.last_loss()?;
        Ok(StepRun { loss, data_wait })
    };
    let diagnosis = bottleneck.diagnose(
        || step(cached.clone(), Duration::ZERO),
        || {
            let waited_from = Instant::now();
            let batch = next_batch()?;
            step(batch, waited_from.elapsed())
        },
    )?;
    Ok(diagnosis)
}
