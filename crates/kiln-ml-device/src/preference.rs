//! Which device the user asked for (`--device auto|cpu|cuda|wgpu`).

use std::str::FromStr;

/// Which device the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DevicePreference {
    /// CUDA device 0 when a driver and a device are found, else a hardware Vulkan adapter,
    /// else the CPU (the rule of [`auto_pick`](crate::auto_pick)).
    #[default]
    Auto,
    /// The CPU, always.
    Cpu,
    /// A CUDA device; an error when none can be used.
    Cuda,
    /// A Vulkan adapter through wgpu, a software one (lavapipe) included; an error when none
    /// can be used.
    Wgpu,
}

impl FromStr for DevicePreference {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" | "flex" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda),
            "wgpu" | "vulkan" => Ok(Self::Wgpu),
            other => Err(format!(
                "unknown device {other:?}: use auto, cpu, cuda or wgpu"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferences_parse() {
        assert_eq!("CPU".parse(), Ok(DevicePreference::Cpu));
        assert_eq!("cuda".parse(), Ok(DevicePreference::Cuda));
        assert_eq!("wgpu".parse(), Ok(DevicePreference::Wgpu));
        assert_eq!("Vulkan".parse(), Ok(DevicePreference::Wgpu));
        let error = "tpu".parse::<DevicePreference>().unwrap_err();
        assert!(error.contains("\"tpu\""), "{error}");
    }
}
