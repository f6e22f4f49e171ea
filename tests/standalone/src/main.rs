//! kiln-ml-sampler alone, feeding Burn's own `DataLoader`.
//!
//! A Burn dataset whose items lie in 24 "files" of uneven size is described to kiln-ml-sampler as
//! a `Layout` (one block per file); a `BlockShuffleSampler` plans an epoch, and Burn's
//! `SelectionDataset` presents the items in the plan's order to Burn's `DataLoader`, which
//! batches them as usual. The program checks what a user relies on and exits non-zero if any
//! check fails: every item comes exactly once, in the plan's order, and batches mix files.

use std::collections::HashSet;

use burn::backend::Flex;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::transform::SelectionDataset;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::prelude::Backend;
use burn::tensor::{Tensor, TensorData};
use kiln_ml_sampler::{
    BlockShuffleConfig, Fingerprint, Layout, PlanRequest, RemainderPolicy, Sampler,
};

/// One item of the user's dataset: where it came from and a value.
#[derive(Debug, Clone)]
struct Item {
    file: u32,
    id: u32,
    value: f32,
}

/// A batch: the values as a tensor, the files and ids for the checks.
#[derive(Debug, Clone)]
struct ItemBatch<B: Backend> {
    values: Tensor<B, 1>,
    files: Vec<u32>,
    ids: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct ItemBatcher;

impl<B: Backend> Batcher<B, Item, ItemBatch<B>> for ItemBatcher {
    fn batch(&self, items: Vec<Item>, device: &B::Device) -> ItemBatch<B> {
        let values: Vec<f32> = items.iter().map(|item| item.value).collect();
        let count = values.len();
        ItemBatch {
            values: Tensor::from_data(TensorData::new(values, [count]), device),
            files: items.iter().map(|item| item.file).collect(),
            ids: items.iter().map(|item| item.id).collect(),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const FILES: u32 = 24;
    const BATCH: u64 = 32;

    // The user's data, file after file, and the same structure as a kiln layout.
    let mut items = Vec::new();
    let mut layout = Layout::builder();
    for file in 0..FILES {
        let rows = 40 + (file * 37) % 160;
        for _ in 0..rows {
            let id = items.len() as u32;
            items.push(Item {
                file,
                id,
                value: id as f32,
            });
        }
        layout.add_file(Fingerprint::builder().u64(u64::from(file)).finish(), &[rows as u64]);
    }
    let layout = layout.build()?;

    let sampler = BlockShuffleConfig::default()
        .with_open_blocks(8)
        .with_buffer_samples(512)
        .with_batch_size(BATCH)
        .with_remainder(RemainderPolicy::Uneven)
        .init()?;
    let plan = sampler.plan(&layout, &PlanRequest::new(7, 0))?;
    let order: Vec<usize> = plan.order().iter().map(|&sample| sample as usize).collect();

    // Burn's own pieces from here on: a selection of the dataset in plan order, batched.
    let dataset = SelectionDataset::from_indices_checked(InMemDataset::new(items), order.clone());
    let total = dataset.len();
    let loader = DataLoaderBuilder::<Flex, Item, ItemBatch<Flex>>::new(ItemBatcher)
        .batch_size(BATCH as usize)
        .build(dataset);

    let mut seen = Vec::with_capacity(total);
    let mut distinct_files = 0usize;
    let mut batches = 0usize;
    let mut sum = 0.0f64;
    for batch in loader.iter() {
        let values: Vec<f32> = batch.values.to_data().to_vec().map_err(|e| format!("{e:?}"))?;
        sum += values.iter().map(|&v| f64::from(v)).sum::<f64>();
        distinct_files += batch.files.iter().collect::<HashSet<_>>().len();
        seen.extend(batch.ids.iter().map(|&id| id as usize));
        batches += 1;
    }
    let mean_distinct = distinct_files as f64 / batches as f64;
    println!(
        "kiln-ml-sampler alone: {total} items in {FILES} files, {batches} batches of up to {BATCH} \
         through Burn's DataLoader; {mean_distinct:.1} distinct files per batch"
    );

    let expected_sum: f64 = (0..total).map(|id| id as f64).sum();
    check(seen == order, "the DataLoader delivers the plan's order")?;
    let unique: HashSet<usize> = seen.iter().copied().collect();
    check(unique.len() == total && seen.len() == total, "every item exactly once")?;
    check(sum == expected_sum, "the tensors carry the items' values")?;
    check(mean_distinct > 4.0, "batches mix files")?;
    println!("all checks passed");
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        println!("ok        {what}");
        Ok(())
    } else {
        Err(format!("FAILED    {what}"))
    }
}
