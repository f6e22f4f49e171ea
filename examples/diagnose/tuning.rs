//! The `--tune-loader` sweep: the input-bound pipeline's loader at each worker count and
//! prefetch depth.

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::core::{BlockSource, PlanRequest, Sampler};
use kiln_ml::data::{BurnCollate, LoaderConfig};
use kiln_ml::profile::{LoaderTuner, LoaderTuning};
use kiln_ml::sampler::{RemainderPolicy, SequentialSampler, Sharding};

use crate::pipeline::SyntheticSource;
use crate::{Args, Pipeline};
use kiln_ml_examples::regressor::{RegressionBatch, RowBatcher};

/// Reads `--tune-batches` batches of `pipeline`'s data with each loader setting; zero workers
/// read and collate on this thread, as a loop without a loader does.
pub fn tune_loader<B: AutodiffBackend>(
    args: &Args,
    pipeline: &Pipeline,
    device: &B::Device,
) -> anyhow::Result<LoaderTuning> {
    let batches = batches_per_setting(args);
    let sampler = SequentialSampler::new(Sharding::new(args.batch, RemainderPolicy::Drop));
    let automatic = automatic_depth::<B>(args, pipeline, &sampler, device)?;
    // The loader's own depth among the candidates, so the sweep can tell whether tuning beats
    // leaving the depth to the loader.
    let depths = LoaderTuner::DEFAULT_PREFETCH_DEPTHS
        .into_iter()
        .chain([automatic]);
    let tuner = LoaderTuner::new().with_prefetch_depths(depths)?;
    let tuning = tuner.run(|setting| -> anyhow::Result<u64> {
        // Exactly the batches read: a loader dropped mid-epoch would first finish the blocks
        // it read ahead, which no training run pays.
        let source = SyntheticSource::new(
            batches as u64 * args.batch,
            args.batch,
            pipeline.cost_per_sample,
        )?;
        let mut samples = 0;
        if setting.workers == 0 {
            for block in 0..batches as u32 {
                let rows = source.read_block(block)?;
                samples += rows.len() as u64;
                let _batch: RegressionBatch<B> = RowBatcher.batch(rows, device);
            }
            return Ok(samples);
        }
        let loader = LoaderConfig::new()
            .with_workers(setting.workers)
            .with_prefetch_batches(setting.prefetch)
            .init(
                source,
                BurnCollate::<B, _, RegressionBatch<B>>::new(RowBatcher, device.clone()),
            )?;
        let mut epoch = loader.plan_epoch(&sampler, &PlanRequest::new(args.seed, 0))?;
        for _ in 0..batches {
            epoch.next().context("the epoch ended early")??;
            samples += args.batch;
        }
        Ok(samples)
    })?;
    Ok(tuning)
}

/// Batches each setting reads: `--tune-batches`, at most the pipeline's whole dataset.
pub fn batches_per_setting(args: &Args) -> usize {
    args.tune_batches.min((args.samples / args.batch) as usize)
}

/// The prefetch depth the loader picks itself for this pipeline's batches (its default
/// configuration, `LoaderConfig::prefetch_batches` left unset).
fn automatic_depth<B: AutodiffBackend>(
    args: &Args,
    pipeline: &Pipeline,
    sampler: &SequentialSampler,
    device: &B::Device,
) -> anyhow::Result<usize> {
    let source = SyntheticSource::new(args.batch, args.batch, pipeline.cost_per_sample)?;
    let plan = sampler.plan(&source, &PlanRequest::new(args.seed, 0))?;
    let loader = LoaderConfig::new().with_workers(1).init(
        source,
        BurnCollate::<B, _, RegressionBatch<B>>::new(RowBatcher, device.clone()),
    )?;
    Ok(loader.prefetch_batches(&plan))
}
