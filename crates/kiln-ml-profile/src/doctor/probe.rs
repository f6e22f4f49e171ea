//! Reading the machine: CPU and RAM (sysinfo), NVIDIA GPUs (NVML), Vulkan adapters (wgpu).

use sysinfo::{CpuRefreshKind, System};

use super::recommend::recommend;
use super::report::{CpuSummary, RamSummary, SystemReport};
use super::vulkan;
use crate::monitor::{SourceStatus, nvml_gpus};

/// What the doctor is told by the program asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorOptions {
    /// The Burn backends the program was built with, by name (`flex`, `wgpu`, `cuda`). The
    /// advice assumes training runs where `kiln_ml::backend::select(DevicePreference::Auto)`
    /// would put it with these: CUDA device 0, else a hardware Vulkan adapter, else the CPU.
    pub compiled_backends: Vec<String>,
}

impl DoctorOptions {
    /// Options for a program built with these Burn backends.
    pub fn new<I, S>(compiled_backends: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            compiled_backends: compiled_backends.into_iter().map(Into::into).collect(),
        }
    }
}

/// Reads this machine and advises on settings. Never fails: a source that cannot be read
/// (no NVIDIA driver, no Vulkan, a build without the `wgpu` feature) is reported unavailable
/// with the reason. Takes a moment: NVML and Vulkan are initialised for the call.
pub fn doctor(options: &DoctorOptions) -> SystemReport {
    let cpu = cpu();
    let ram = ram();
    let (nvml, gpus) = match nvml_gpus() {
        Ok(gpus) => {
            let detail = format!("{} GPU(s)", gpus.len());
            (SourceStatus::available("nvml", Some(detail)), gpus)
        }
        Err(reason) => (SourceStatus::unavailable("nvml", reason), Vec::new()),
    };
    let (vulkan, vulkan_adapters) = vulkan::adapters();
    let recommendations = recommend(
        &cpu,
        &ram,
        &gpus,
        &vulkan_adapters,
        &options.compiled_backends,
    );
    SystemReport {
        cpu,
        ram,
        nvml,
        gpus,
        vulkan,
        vulkan_adapters,
        burn_backends: options.compiled_backends.clone(),
        recommendations,
    }
}

fn cpu() -> CpuSummary {
    let mut system = System::new();
    system.refresh_cpu_list(CpuRefreshKind::nothing());
    let logical_cores = system.cpus().len().max(1);
    let model = system
        .cpus()
        .first()
        .map(|cpu| cpu.brand().trim().to_owned())
        .unwrap_or_default();
    let available_cores = std::thread::available_parallelism()
        .map(|cores| cores.get())
        .unwrap_or(logical_cores);
    CpuSummary {
        model,
        physical_cores: System::physical_core_count()
            .unwrap_or(logical_cores)
            .max(1),
        logical_cores,
        available_cores,
    }
}

fn ram() -> RamSummary {
    let mut system = System::new();
    system.refresh_memory();
    let mut ram = RamSummary {
        total_bytes: system.total_memory(),
        available_bytes: system.available_memory(),
    };
    // In a container the cgroup's limit is what this process can have. sysinfo asserts that
    // the memory was read first: where /proc/meminfo cannot be read (total 0), it would panic.
    if ram.total_bytes > 0
        && let Some(limits) = system.cgroup_limits()
    {
        ram.total_bytes = ram.total_bytes.min(limits.total_memory);
        ram.available_bytes = ram.available_bytes.min(limits.free_memory);
    }
    ram
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_this_machine_and_advises() {
        let report = doctor(&DoctorOptions::new(["flex"]));
        assert!(report.cpu.physical_cores >= 1 && report.cpu.logical_cores >= 1);
        assert!(report.cpu.available_cores >= 1);
        assert!(report.ram.total_bytes > 0);
        assert!(report.ram.available_bytes <= report.ram.total_bytes);
        if report.nvml.available {
            assert!(report.nvml.reason.is_none());
        } else {
            // No driver here: a reason, and no GPUs.
            assert!(report.nvml.reason.as_ref().is_some_and(|r| !r.is_empty()));
            assert!(report.gpus.is_empty());
        }
        assert_eq!(report.burn_backends, ["flex"]);
        let advice = &report.recommendations;
        assert!(!advice.preset.value.is_empty() && !advice.preset.why.is_empty());
        // Only flex built in: training runs on the CPU whatever the machine has.
        assert_eq!(advice.precision.value, "f32");
        assert!(advice.loader_workers.value <= 8);
        assert!(advice.batch.value.advice.contains("BatchSizeFinder"));
    }

    #[test]
    fn the_report_serializes_with_snake_case_names() {
        let report = doctor(&DoctorOptions::new(["flex", "wgpu"]));
        let json = serde_json::to_value(&report).unwrap();
        for key in [
            "cpu",
            "ram",
            "nvml",
            "gpus",
            "vulkan",
            "vulkan_adapters",
            "burn_backends",
            "recommendations",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert!(json["ram"]["total_bytes"].as_u64().unwrap() > 0);
        assert!(json["recommendations"]["loader_workers"]["value"].is_u64());
        let back: SystemReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, report);
    }
}
