//! Where training would run, and which faster device present on the machine the build cannot
//! use.

use kiln_ml_device::{AutoPick, VulkanAdapter, auto_pick, best_gpu_adapter};

use crate::monitor::GpuInfo;

/// Where training would run: what `kiln_ml_device::select(DevicePreference::Auto)` picks with
/// these backends built in, by the same rule (`kiln_ml_device::auto_pick`).
pub(super) type Target<'a> = AutoPick<'a, &'a GpuInfo>;

/// The target, and why a faster device present on the machine was passed over.
pub(super) fn target<'a>(
    gpus: &'a [GpuInfo],
    adapters: &'a [VulkanAdapter],
    backends: &[String],
) -> (Target<'a>, Option<String>) {
    let built = |name: &str| backends.iter().any(|b| b.eq_ignore_ascii_case(name));
    // CUDA's device 0 (what `select` takes), which `CUDA_VISIBLE_DEVICES` may map to another
    // NVML device, or hide; where no mapping is known, the first GPU not hidden.
    let mapped = gpus.iter().any(|gpu| gpu.cuda_device.is_some());
    let cuda_gpu = gpus
        .iter()
        .find(|gpu| gpu.cuda_device == Some(0) || (!mapped && !gpu.hidden_from_cuda));
    let usable_gpu = cuda_gpu.filter(|_| built("cuda"));
    let usable_adapters = if built("wgpu") { adapters } else { &[] };
    let target = auto_pick(usable_gpu, usable_adapters);
    if !matches!(target, AutoPick::Cpu) {
        return (target, None);
    }
    let passed_over = if let Some(gpu) = cuda_gpu {
        Some(format!(
            "{} is present, but this build lacks the `cuda` feature",
            gpu_name(gpu)
        ))
    } else if let Some(gpu) = gpus.first() {
        Some(format!(
            "{} is present, but CUDA_VISIBLE_DEVICES hides every GPU from CUDA",
            gpu_name(gpu)
        ))
    } else if let Some(adapter) = best_gpu_adapter(adapters) {
        Some(format!(
            "the Vulkan GPU {} is present, but this build lacks the `wgpu` feature",
            adapter.name
        ))
    } else {
        adapters
            .iter()
            .find(|adapter| !adapter.is_gpu())
            .filter(|_| built("wgpu"))
            .map(|adapter| {
                format!(
                    "the only Vulkan adapter, {}, runs on the CPU: it has f16 but is slower than \
                     flex",
                    adapter.name
                )
            })
    };
    (target, passed_over)
}

/// The GPU's name as NVML gives it, or its index.
pub(super) fn gpu_name(gpu: &GpuInfo) -> String {
    gpu.name
        .clone()
        .unwrap_or_else(|| format!("GPU {}", gpu.index))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{adapter, gpu};
    use super::*;
    use kiln_ml_device::AdapterKind;

    fn backends(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn cuda_comes_first_then_a_hardware_vulkan_adapter_then_the_cpu() {
        let h100 = [gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)];
        let radeon = [adapter("AMD Radeon RX 7900 XTX", AdapterKind::Discrete)];
        let all = backends(&["flex", "wgpu", "cuda"]);
        assert!(matches!(
            target(&h100, &radeon, &all),
            (AutoPick::Cuda(_), None)
        ));
        assert!(matches!(
            target(&[], &radeon, &all),
            (AutoPick::Vulkan(_), None)
        ));
        assert!(matches!(target(&[], &[], &all), (AutoPick::Cpu, None)));
    }

    #[test]
    fn a_gpu_the_build_cannot_use_is_named() {
        let h100 = [gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)];
        let (chosen, passed_over) = target(&h100, &[], &backends(&["flex", "wgpu"]));
        assert!(matches!(chosen, AutoPick::Cpu));
        let passed_over = passed_over.expect("the H100 was passed over");
        assert!(passed_over.contains("`cuda` feature"), "{passed_over}");
    }

    #[test]
    fn the_target_is_the_gpu_cuda_numbers_0() {
        // CUDA_VISIBLE_DEVICES=1: NVML's GPU 1 is CUDA's device 0, GPU 0 is hidden.
        let mut hidden = gpu("NVIDIA A100-SXM4-40GB", (8, 0), 40);
        hidden.cuda_device = None;
        hidden.hidden_from_cuda = true;
        let mut visible = gpu("NVIDIA H100 80GB HBM3", (9, 0), 80);
        visible.index = 1;
        let all = backends(&["flex", "cuda"]);
        let machine = [hidden.clone(), visible];
        let (chosen, _) = target(&machine, &[], &all);
        let AutoPick::Cuda(chosen) = chosen else {
            panic!("CUDA device 0 is an H100")
        };
        assert_eq!(chosen.index, 1);
        // Every GPU hidden: training runs on the CPU, and the note says why.
        let (chosen, passed_over) = target(std::slice::from_ref(&hidden), &[], &all);
        assert!(matches!(chosen, AutoPick::Cpu));
        let passed_over = passed_over.expect("the hidden A100 is named");
        assert!(
            passed_over.contains("CUDA_VISIBLE_DEVICES"),
            "{passed_over}"
        );
        // No mapping known (MIG instances named, or a report from before it was kept): the
        // first GPU, as CUDA's device 0 most likely is.
        let mut unknown = gpu("NVIDIA H100 80GB HBM3", (9, 0), 80);
        unknown.cuda_device = None;
        let (chosen, _) = target(std::slice::from_ref(&unknown), &[], &all);
        assert!(matches!(chosen, AutoPick::Cuda(_)));
    }

    #[test]
    fn a_software_adapter_is_not_a_gpu() {
        let lavapipe = [adapter(
            "llvmpipe (LLVM 15.0.6, 256 bits)",
            AdapterKind::Software,
        )];
        let (chosen, passed_over) = target(&[], &lavapipe, &backends(&["flex", "wgpu"]));
        assert!(matches!(chosen, AutoPick::Cpu));
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
