//! The cached-batch test on kiln's trainer, shared by the `diagnose` example and the quickstart:
//! steps on one batch kept on the device against steps on batches from the real loader.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::data::Epoch;
use kiln_ml::profile::StepRun;
use kiln_ml::profile::{Bottleneck, Diagnosis};
use kiln_ml::train::{TrainStep, Trainer};

/// The loader's batches epoch after epoch from `first_epoch`, as the cached-batch test's real
/// run takes them: `open(epoch)` is called at the epoch's first batch, never earlier (an epoch
/// opened before the cached run would fill its prefetch window meanwhile, and the real run
/// would be measured on that backlog instead of on the loader's pace).
pub fn epoch_after_epoch<'a, T: 'a, E>(
    mut open: impl FnMut(u64) -> Result<Epoch<'a, T>, E> + 'a,
    first_epoch: u64,
) -> impl FnMut() -> anyhow::Result<T> + 'a
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut epoch: Option<Epoch<'a, T>> = None;
    let mut next_epoch = first_epoch;
    move || loop {
        let current = match &mut epoch {
            Some(current) => current,
            None => {
                let opened = open(next_epoch)?;
                next_epoch += 1;
                epoch.insert(opened)
            }
        };
        match current.next() {
            Some(batch) => return Ok(batch?),
            None => epoch = None,
        }
    }
}

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
