//! What this machine offers for training, and settings to start from.
//!
//! Prints kiln-ml-profile's system report: the CPU and RAM, the NVIDIA GPUs NVML sees, the Vulkan
//! adapters wgpu lists (with `--features wgpu`), the Burn backends this binary was built with,
//! and recommendations (preset, precision, loader workers, how to find the batch size), each
//! with its reason. A source that cannot be read is reported unavailable, with the reason.
//!
//! Run: `cargo run --release --example doctor -- --help`

use clap::Parser;
use kiln_ml::profile::{DoctorOptions, doctor};

/// Report this machine's CPU, RAM, GPUs and Vulkan adapters, and recommend training settings.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    output: kiln_ml_examples::cli::JsonOutput,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let report = doctor(&DoctorOptions::new(kiln_ml::backend::compiled_backends()));
    print!("{}", report.to_text());
    // What kiln's own device choice makes of the same machine (the same rule as the advice).
    // Its failure (a bad KILN_* setting, say) is part of the diagnosis: the report is written
    // first, then the error returned.
    let selection = kiln_ml::backend::select(kiln_ml::backend::DevicePreference::Auto);
    match &selection {
        Ok(selection) => println!("\nkiln_ml::backend::select(auto): {selection}"),
        Err(error) => println!("\nkiln_ml::backend::select(auto) failed: {error}"),
    }
    args.output.write(&report)?;
    selection?;
    Ok(())
}
