//! Validation: the inner (non-autodiff) model feeding kiln-ml-core `Metric`s.

use std::borrow::Borrow;

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::{Metric, Phase};

use crate::{Error, InferenceStep, Result, TrainStep, Trainer};

/// The validation input of a model `M` trained on backend `B`.
pub type ValidInput<B, M> = <<M as AutodiffModule<B>>::InnerModule as InferenceStep<
    <B as AutodiffBackend>::InnerBackend,
>>::Input;

/// The validation output of a model `M` trained on backend `B`.
pub type ValidOutput<B, M> = <<M as AutodiffModule<B>>::InnerModule as InferenceStep<
    <B as AutodiffBackend>::InnerBackend,
>>::Output;

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Runs the model without autodiff over `batches` (at most
    /// [`max_validation_batches`](crate::TrainerConfig::max_validation_batches)) at the
    /// training precision, updates `metric` with every output, and returns its value.
    ///
    /// The metric may consume the output itself or anything the output borrows as (a
    /// `Vec<f64>` output feeds a `Metric<[f64]>`). It is not reset first, so several calls (or ranks) can accumulate into one;
    /// call [`Metric::reset`] for a fresh value. Timed as [`Phase::Validation`].
    pub fn validate<I, X, Mt>(&self, batches: I, metric: &mut Mt) -> Result<Mt::Value>
    where
        M::InnerModule: InferenceStep<B::InnerBackend>,
        I: IntoIterator<Item = ValidInput<B, M>>,
        ValidOutput<B, M>: Borrow<X>,
        X: ?Sized,
        Mt: Metric<X>,
    {
        self.validate_module(self.model().valid(), batches, metric)
    }

    /// [`validate`](Self::validate) with the moving average of the weights
    /// ([`TrainerConfig::ema`](crate::TrainerConfig::ema)); `None` before its first update.
    pub fn validate_ema<I, X, Mt>(&self, batches: I, metric: &mut Mt) -> Result<Option<Mt::Value>>
    where
        M::InnerModule: InferenceStep<B::InnerBackend>,
        I: IntoIterator<Item = ValidInput<B, M>>,
        ValidOutput<B, M>: Borrow<X>,
        X: ?Sized,
        Mt: Metric<X>,
    {
        let Some(ema) = &self.ema else {
            return Ok(None);
        };
        self.validate_module(ema.valid(), batches, metric).map(Some)
    }

    fn validate_module<I, X, Mt>(
        &self,
        mut model: M::InnerModule,
        batches: I,
        metric: &mut Mt,
    ) -> Result<Mt::Value>
    where
        M::InnerModule: InferenceStep<B::InnerBackend>,
        I: IntoIterator<Item = ValidInput<B, M>>,
        ValidOutput<B, M>: Borrow<X>,
        X: ?Sized,
        Mt: Metric<X>,
    {
        // The inner module has the master's field paths, so the training plan applies as is.
        if let Some(plan) = &self.cast_plan {
            model = plan.cast(model, self.autocast.compute_dtype());
        }
        let limit = self.config.max_validation_batches.unwrap_or(u64::MAX);
        let started = self.observers.start_drained::<B>(
            Phase::Validation,
            self.counters.optimizer_steps,
            &self.device,
        )?;
        let pass = || -> Result<()> {
            let mut count = 0;
            for (index, batch) in (0..limit).zip(batches) {
                let output = model.step(batch, &self.autocast);
                metric
                    .update(output.borrow())
                    .map_err(|error| Error::Metric {
                        batch: index,
                        source: Box::new(error),
                    })?;
                count = index + 1;
            }
            // A metric measured on the device reads the whole pass back here, once.
            metric.flush().map_err(|error| Error::MetricFlush {
                batches: count,
                source: Box::new(error),
            })
        };
        let passed = pass();
        // The phase ends whatever the pass returned: observers never see it left open.
        let ended = self.observers.end::<B>(started, &self.device);
        passed?;
        ended?;
        Ok(metric.compute())
    }
}
