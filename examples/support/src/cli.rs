//! The flags every example shares: where the figures go (`--json PATH`) and which device runs
//! (`--device`), declared once and flattened into each example's arguments.

use std::path::PathBuf;

use anyhow::Context;
use kiln_ml::backend::{DevicePreference, Selection, select};
use serde::Serialize;

/// `--json PATH`: the figures as one JSON object, the contract the docs and CI read.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct JsonOutput {
    /// Write the figures as one JSON object to this path (written whole or not at all).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

impl JsonOutput {
    /// Writes `figures` (pretty, one trailing newline) when `--json` was given, atomically and
    /// durably, and says where.
    pub fn write(&self, figures: &impl Serialize) -> anyhow::Result<()> {
        let Some(path) = &self.json else {
            return Ok(());
        };
        let text = serde_json::to_string_pretty(figures)? + "\n";
        kiln_ml::core::write_atomic(path, text.as_bytes(), kiln_ml::core::Durability::Synced)
            .with_context(|| format!("writing the figures to {}", path.display()))?;
        println!("figures written to {}", path.display());
        Ok(())
    }
}

/// `--device`, defaulting to `auto` (CUDA, else a Vulkan GPU, else the CPU).
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceChoice {
    /// Compute device: auto, cpu, cuda (needs `--features cuda`) or wgpu (a Vulkan adapter,
    /// lavapipe included; needs `--features wgpu`).
    #[arg(long, default_value = "auto")]
    pub device: DevicePreference,
}

/// `--device`, defaulting to `cpu`: for examples whose figures compare against the CPU.
#[derive(clap::Args, Debug, Clone)]
pub struct CpuDeviceChoice {
    /// Compute device: cpu, auto, cuda (needs `--features cuda`) or wgpu (a Vulkan adapter,
    /// lavapipe included; needs `--features wgpu`).
    #[arg(long, default_value = "cpu")]
    pub device: DevicePreference,
}

impl DeviceChoice {
    /// The device, selected (an error names why a requested GPU cannot be used).
    pub fn select(&self) -> anyhow::Result<Selection> {
        Ok(select(self.device)?)
    }
}

impl CpuDeviceChoice {
    /// The device, selected (an error names why a requested GPU cannot be used).
    pub fn select(&self) -> anyhow::Result<Selection> {
        Ok(select(self.device)?)
    }
}

/// A clap value parser for counts that must be at least 1 (`--epochs 0`, a row group of 0
/// rows): the flag is refused by name instead of failing deep inside a run.
pub fn at_least_one<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    let value: T = text.parse().map_err(|error| format!("{error}"))?;
    if value < T::from(1) {
        return Err("must be at least 1".to_owned());
    }
    Ok(value)
}
