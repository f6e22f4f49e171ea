//! Where training would run, and which faster device present on the machine the build cannot
//! use.

use super::super::report::VulkanAdapter;
use crate::monitor::GpuInfo;

/// Where training would run: what `kiln::backend::select(DevicePreference::Auto)` picks with
/// these backends built in (CUDA device 0, else a hardware Vulkan adapter, else the CPU).
#[derive(Debug, Clone, Copy)]
pub(super) enum Target<'a> {
    Cuda(&'a GpuInfo),
    Vulkan(&'a VulkanAdapter),
    Cpu,
}

/// The target, and why a faster device present on the machine was passed over.
pub(super) fn target<'a>(
    gpus: &'a [GpuInfo],
    adapters: &'a [VulkanAdapter],
    backends: &[String],
) -> (Target<'a>, Option<String>) {
    let built = |name: &str| backends.iter().any(|b| b.eq_ignore_ascii_case(name));
    if let Some(gpu) = gpus.first()
        && built("cuda")
    {
        return (Target::Cuda(gpu), None);
    }
    let hardware = adapters
        .iter()
        .filter(|adapter| !adapter.is_software())
        .min_by_key(|adapter| adapter.device_type as u8);
    if let Some(adapter) = hardware
        && built("wgpu")
    {
        return (Target::Vulkan(adapter), None);
    }
    let passed_over = if let Some(gpu) = gpus.first() {
        Some(format!(
            "{} is present, but this build lacks the `cuda` feature",
            gpu_name(gpu)
        ))
    } else if let Some(adapter) = hardware {
        Some(format!(
            "the Vulkan GPU {} is present, but this build lacks the `wgpu` feature",
            adapter.name
        ))
    } else {
        adapters
            .iter()
            .find(|adapter| adapter.is_software())
            .filter(|_| built("wgpu"))
            .map(|adapter| {
                format!(
                    "the only Vulkan adapter, {}, runs on the CPU: it has f16 but is slower than \
                     flex",
                    adapter.name
                )
            })
    };
    (Target::Cpu, passed_over)
}

/// The GPU's name as NVML gives it, or its index.
pub(super) fn gpu_name(gpu: &GpuInfo) -> String {
    gpu.name
        .clone()
        .unwrap_or_else(|| format!("GPU {}", gpu.index))
}

#[cfg(test)]
mod tests {
    use super::super::super::report::VulkanDeviceType;
    use super::super::fixtures::{adapter, gpu};
    use super::*;

    fn backends(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn cuda_comes_first_then_a_hardware_vulkan_adapter_then_the_cpu() {
        let h100 = [gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)];
        let radeon = [adapter(
            "AMD Radeon RX 7900 XTX",
            VulkanDeviceType::DiscreteGpu,
        )];
        let all = backends(&["flex", "wgpu", "cuda"]);
        assert!(matches!(
            target(&h100, &radeon, &all),
            (Target::Cuda(_), None)
        ));
        assert!(matches!(
            target(&[], &radeon, &all),
            (Target::Vulkan(_), None)
        ));
        assert!(matches!(target(&[], &[], &all), (Target::Cpu, None)));
    }

    #[test]
    fn a_gpu_the_build_cannot_use_is_named() {
        let h100 = [gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)];
        let (chosen, passed_over) = target(&h100, &[], &backends(&["flex", "wgpu"]));
        assert!(matches!(chosen, Target::Cpu));
        let passed_over = passed_over.expect("the H100 was passed over");
        assert!(passed_over.contains("`cuda` feature"), "{passed_over}");
    }

    #[test]
    fn a_software_adapter_is_not_a_gpu() {
        let lavapipe = [adapter(
            "llvmpipe (LLVM 15.0.6, 256 bits)",
            VulkanDeviceType::Cpu,
        )];
        let (chosen, passed_over) = target(&[], &lavapipe, &backends(&["flex", "wgpu"]));
        assert!(matches!(chosen, Target::Cpu));
        assert!(passed_over.is_some_and(|note| note.contains("llvmpipe")));
    }

    #[test]
    fn an_unnamed_gpu_goes_by_its_index() {
        let mut unnamed = gpu("", (9, 0), 80);
        unnamed.name = None;
        unnamed.index = 3;
        assert_eq!(gpu_name(&unnamed), "GPU 3");
    }
}
