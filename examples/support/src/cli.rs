//! The flags every example shares: where the figures go (`--json PATH`) and which device runs
//! (`--device`), declared once and flattened into each example's arguments.

use std::path::PathBuf;

use anyhow::Context;
use kiln_ml::backend::{DevicePreference, Selection, select};
use kiln_ml::train::{EmaConfig, TrainerConfig};
use serde::Serialize;

/// `--json PATH`: the figures as one JSON object, the contract the docs and CI read.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct JsonOutput {
    /// Write the figures as one JSON object to this path (written whole or not at all).
    #[arg(long, value_name = "PATH", value_parser = json_path)]
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
    at_least(text, 1)
}

/// A clap value parser for counts that must be at least 2 (a batch that pairs samples, an
/// accumulation that accumulates).
pub fn at_least_two<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    at_least(text, 2)
}

fn at_least<T>(text: &str, least: u8) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    let value: T = text.parse().map_err(|error| format!("{error}"))?;
    if value < T::from(least) {
        return Err(format!("must be at least {least}"));
    }
    Ok(value)
}

/// A clap value parser for finite values above 0 (a learning rate): NaN, infinities, 0 and
/// negative values are refused by name instead of training to NaN or ascending the loss.
pub fn positive_finite(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|error| format!("{error}"))?;
    if !(value.is_finite() && value > 0.0) {
        return Err("must be a finite number above 0".to_owned());
    }
    Ok(value)
}

/// A clap value parser for finite values of 0 or more (a threshold where 0 means "off").
pub fn non_negative_finite(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|error| format!("{error}"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err("must be a finite number, 0 or more".to_owned());
    }
    Ok(value)
}

/// A clap value parser for an exponential moving average's decay, checked by the trainer's own
/// rule (`TrainerConfig::validate`) when the flags are read rather than after the data is
/// prepared.
pub fn decay(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|error| format!("{error}"))?;
    TrainerConfig::new()
        .with_ema(Some(EmaConfig::new(value)))
        .validate()
        .map(|()| value)
        .map_err(|error| error.to_string())
}

/// A clap value parser for `--json PATH`: the path must not be a folder, and its folder is
/// made now if missing (as `mkdir -p`), so that a path that cannot be written fails before
/// the run rather than after it, when the figures would be lost.
pub fn json_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.is_dir() {
        return Err(format!("{text} is a directory; give a file path"));
    }
    // `out/` or `out/.` name a folder, not a file, even before it exists.
    let names_folder = text.ends_with(std::path::is_separator)
        || text
            .strip_suffix('.')
            .is_some_and(|rest| rest.is_empty() || rest.ends_with(std::path::is_separator))
        || path.file_name().is_none();
    if names_folder {
        return Err(format!("{text} names a folder; give a file path"));
    }
    let folder = match path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        Some(parent) => {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("cannot make its folder {}: {error}", parent.display()))?;
            parent
        }
        None => std::path::Path::new("."),
    };
    // The figures are written atomically through a temporary file beside the target: try one
    // now (removed when dropped).
    tempfile::Builder::new()
        .prefix(".kiln-json-probe")
        .tempfile_in(folder)
        .map_err(|error| format!("cannot write in its folder {}: {error}", folder.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_out_of_range_are_refused() {
        assert_eq!(positive_finite("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "x"] {
            assert!(positive_finite(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative_finite("0"), Ok(0.0));
        for bad in ["-0.5", "NaN", "-inf"] {
            assert!(non_negative_finite(bad).is_err(), "{bad}");
        }
        assert_eq!(at_least_one::<usize>("3"), Ok(3));
        assert!(at_least_one::<usize>("0").is_err());
        assert_eq!(decay("0.999"), Ok(0.999));
        assert_eq!(decay("0"), Ok(0.0));
        for bad in ["1", "1.5", "-0.1", "NaN", "x"] {
            assert!(decay(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_json_path_gets_its_folder_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("out.json");
        assert_eq!(json_path(good.to_str().unwrap()), Ok(good));
        assert_eq!(json_path("out.json"), Ok(PathBuf::from("out.json")));
        let nested = dir.path().join("runs").join("a").join("out.json");
        assert_eq!(json_path(nested.to_str().unwrap()), Ok(nested.clone()));
        assert!(nested.parent().unwrap().is_dir());
        // A folder that cannot be made: its would-be parent is a file.
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let error = json_path(file.join("out.json").to_str().unwrap()).unwrap_err();
        assert!(error.contains("cannot make its folder"), "{error}");
        let error = json_path(dir.path().to_str().unwrap()).unwrap_err();
        assert!(error.contains("is a directory"), "{error}");
        // A folder still to be made is no file either.
        for folder in ["new/", "new/..", "new/."] {
            let folder = format!("{}/{folder}", dir.path().display());
            let error = json_path(&folder).unwrap_err();
            assert!(
                error.contains("folder") || error.contains("directory"),
                "{error}"
            );
        }
        assert!(!dir.path().join("new").exists());
    }
}
