//! kiln quickstart: what kiln can do today, end to end on this machine.
//!
//! 1. Builds a seeded synthetic dataset layout: many files of uneven size, each split into
//!    row-group blocks, fingerprinted the way kiln's caches key it.
//! 2. Picks the compute device the way every kiln example does (CUDA only when a driver is
//!    found, the flex CPU backend otherwise) and runs a small computation there.
//!
//! Run: `cargo run --release --example quickstart -- --help`

use std::time::Instant;

use anyhow::Context;
use burn::tensor::{ElementConversion, Tensor, TensorData, backend::AutodiffBackend};
use clap::Parser;
use kiln::backend::{BackendTask, DevicePreference, select};
use kiln::core::{BlockLayout, Fingerprint, Layout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Build a synthetic multi-file dataset layout and report on it and on the compute device.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Number of files in the synthetic dataset.
    #[arg(long, default_value_t = 660)]
    files: u32,
    /// Total number of samples (rows) across all files.
    #[arg(long, default_value_t = 900_000)]
    samples: u64,
    /// Rows per block (Parquet row group) before the last, shorter block of each file.
    #[arg(long, default_value_t = 4096)]
    block_rows: u64,
    /// Seed for the synthetic file sizes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Compute device: auto, cpu or cuda.
    #[arg(long, default_value = "auto")]
    device: DevicePreference,
    /// Write the figures as one JSON object to this path.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// Splits `samples` into `files` uneven file sizes (log-uniform weights, spanning about 20x).
fn file_sizes(files: u32, samples: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let weights: Vec<f64> = (0..files)
        .map(|_| rng.random_range(0.0f64..3.0).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut sizes: Vec<u64> = weights
        .iter()
        .map(|w| (w / total * samples as f64).floor() as u64)
        .collect();
    // Hand the rounding remainder out one row at a time so the total is exact.
    let assigned: u64 = sizes.iter().sum();
    for index in 0..(samples - assigned) as usize {
        sizes[index % files as usize] += 1;
    }
    sizes
}

/// Mean and standard deviation of the block sizes, computed on the selected device.
struct BlockStats {
    rows: Vec<f32>,
}

impl BackendTask for BlockStats {
    type Output = (f32, f32);
    fn run<B: AutodiffBackend>(self, device: B::Device) -> (f32, f32) {
        let count = self.rows.len();
        let rows = Tensor::<B, 1>::from_data(TensorData::new(self.rows, [count]), &device);
        let mean = rows.clone().mean();
        let variance = (rows - mean.clone()).powi_scalar(2).mean();
        let mean: f32 = mean.into_scalar().elem();
        let std: f32 = variance.sqrt().into_scalar().elem();
        (mean, std)
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.files > 0, "--files must be at least 1");
    anyhow::ensure!(args.block_rows > 0, "--block-rows must be at least 1");
    anyhow::ensure!(
        args.samples >= u64::from(args.files),
        "--samples ({}) must be at least --files ({})",
        args.samples,
        args.files
    );

    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut builder = Layout::builder();
    for (file, size) in file_sizes(args.files, args.samples, &mut rng)
        .into_iter()
        .enumerate()
    {
        let mut blocks = vec![args.block_rows; (size / args.block_rows) as usize];
        if size % args.block_rows != 0 {
            blocks.push(size % args.block_rows);
        }
        let identity = Fingerprint::builder()
            .str(&format!("events-{file:04}.parquet"))
            .u64(size)
            .finish();
        builder.add_file(identity, &blocks);
    }
    let layout = builder.build().context("building the synthetic layout")?;
    let layout_seconds = started.elapsed().as_secs_f64();

    let file_rows: Vec<u64> = {
        let mut rows = vec![0u64; layout.num_files()];
        for block in layout.blocks() {
            rows[block.file as usize] += block.rows;
        }
        rows
    };
    let smallest_file = file_rows.iter().min().copied().unwrap_or(0);
    let largest_file = file_rows.iter().max().copied().unwrap_or(0);

    let selection = select(args.device).map_err(anyhow::Error::msg)?;
    let rows: Vec<f32> = layout.blocks().iter().map(|b| b.rows as f32).collect();
    let (mean_block_rows, std_block_rows) = selection.run(BlockStats { rows });

    println!("kiln quickstart");
    println!(
        "  layout      {} files, {} blocks, {} samples",
        layout.num_files(),
        layout.num_blocks(),
        layout.num_samples()
    );
    println!("  file rows   smallest {smallest_file}, largest {largest_file}");
    println!("  block rows  mean {mean_block_rows:.1}, std {std_block_rows:.1}");
    println!("  fingerprint {}", layout.fingerprint());
    println!("  built in    {:.3} ms", layout_seconds * 1e3);
    println!("  device      {selection}");

    if let Some(path) = &args.json {
        let figures = serde_json::json!({
            "files": layout.num_files(),
            "blocks": layout.num_blocks(),
            "samples": layout.num_samples(),
            "smallest_file_rows": smallest_file,
            "largest_file_rows": largest_file,
            "mean_block_rows": mean_block_rows,
            "std_block_rows": std_block_rows,
            "fingerprint": layout.fingerprint().to_string(),
            "layout_seconds": layout_seconds,
            "device": selection.name(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&figures)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
