//! Sum repeatability: does summing the same tensor twice give the same bits?
//!
//! Burn 0.21's `Tensor::sum` on its CubeCL runtimes (CUDA, wgpu) adds the partial sums of a few
//! cubes into its output with float atomics, in the order they finish, so its last bits can
//! change from call to call. A gradient-clipping coefficient computed from such a sum makes two
//! runs of one seed part ways; kiln-ml-train sums its norms with `fixed_order_sum` instead.
//! This example sums one tensor of each size `--repeats` times with Burn's `sum()`, `sum_dim`,
//! `mean()` and kiln's `fixed_order_sum`, and counts the distinct results of each (1: repeatable).
//!
//! Run: `cargo run --release --features wgpu --example sum_repeatability -- --device wgpu --json out.json`

use std::collections::BTreeMap;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use clap::Parser;
use kiln_ml::backend::BackendTask;
use kiln_ml::train::fixed_order_sum;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Count the distinct results of summing one tensor again and again.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// Sums of each tensor, per way of summing.
    #[arg(long, default_value_t = 300)]
    repeats: usize,
    /// Tensor sizes (elements), comma-separated; values uniform in [-1, 1).
    #[arg(long, value_delimiter = ',', default_value = "1000,92160,1000000")]
    sizes: Vec<usize>,
    #[command(flatten)]
    device: kiln_ml_examples::cli::DeviceChoice,
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

/// How often each distinct result came, most frequent first, per way of summing.
#[derive(Debug, Serialize)]
struct SizeCounts {
    elements: usize,
    sum: Vec<usize>,
    sum_dim: Vec<usize>,
    mean: Vec<usize>,
    fixed_order_sum: Vec<usize>,
}

struct Measure {
    args: Args,
}

impl BackendTask for Measure {
    type Output = anyhow::Result<Vec<SizeCounts>>;

    fn run<B: AutodiffBackend>(self, device: B::Device) -> Self::Output {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut counts = Vec::new();
        for &elements in &self.args.sizes {
            let values: Vec<f32> = (0..elements).map(|_| rng.random_range(-1.0..1.0)).collect();
            let tensor = Tensor::<B::InnerBackend, 1>::from_data(
                TensorData::new(values, [elements]),
                &device,
            );
            let repeats = self.args.repeats;
            counts.push(SizeCounts {
                elements,
                sum: distinct(repeats, || tensor.clone().sum())?,
                sum_dim: distinct(repeats, || tensor.clone().sum_dim(0))?,
                mean: distinct(repeats, || tensor.clone().mean())?,
                fixed_order_sum: distinct(repeats, || fixed_order_sum(tensor.clone()))?,
            });
        }
        Ok(counts)
    }
}

/// Runs `reduce` `repeats` times and counts each distinct result's bits.
fn distinct<B: Backend>(
    repeats: usize,
    reduce: impl Fn() -> Tensor<B, 1>,
) -> anyhow::Result<Vec<usize>> {
    let mut seen = BTreeMap::<u32, usize>::new();
    for _ in 0..repeats {
        let data = reduce()
            .try_into_data()
            .map_err(|error| anyhow::anyhow!("reading a sum back: {error:?}"))?;
        let value = data
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|error| anyhow::anyhow!("reading a sum back: {error:?}"))?[0];
        *seen.entry(value.to_bits()).or_default() += 1;
    }
    let mut counts: Vec<usize> = seen.into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    Ok(counts)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.repeats > 0, "--repeats must be at least 1");
    anyhow::ensure!(
        args.sizes.iter().all(|&size| size > 0),
        "--sizes must all be at least 1"
    );
    let selection = args.device.select()?;
    println!(
        "device: {selection}; {} sums per tensor and way",
        args.repeats
    );
    let counts = selection.run(Measure { args: args.clone() })?;
    println!("distinct results (how often each) per way of summing:");
    for size in &counts {
        println!(
            "{:>10} elements: sum() {:?}  sum_dim(0) {:?}  mean() {:?}  fixed_order_sum {:?}",
            size.elements, size.sum, size.sum_dim, size.mean, size.fixed_order_sum
        );
    }
    args.output.write(&serde_json::json!({
        "device": selection.name(),
        "repeats": args.repeats,
        "sizes": counts,
    }))?;
    Ok(())
}
