//! The one rule of `--device auto`, shared by [`select`](crate::select) and kiln-ml-profile's
//! doctor: CUDA device 0 when CUDA can be used, else the best hardware Vulkan adapter, else
//! the CPU. A software Vulkan driver (Mesa's lavapipe) is never taken: it is slower than flex on
//! the same CPU. Ask for it by name (`--device wgpu`) to run Burn's GPU code paths without a GPU.

use crate::vulkan::VulkanAdapter;

/// What `auto` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoPick<'a, C> {
    /// CUDA, with what the caller knows of it.
    Cuda(C),
    /// A hardware Vulkan adapter.
    Vulkan(&'a VulkanAdapter),
    /// The CPU (flex).
    Cpu,
}

/// Applies the rule to what this build can use: `cuda` is `Some` when CUDA can be used (with
/// whatever the caller wants back: a device name, NVML's description), `adapters` the Vulkan
/// adapters the build can use (none without the `wgpu` feature).
pub fn auto_pick<C>(cuda: Option<C>, adapters: &[VulkanAdapter]) -> AutoPick<'_, C> {
    if let Some(cuda) = cuda {
        return AutoPick::Cuda(cuda);
    }
    match best_gpu_adapter(adapters) {
        Some(adapter) => AutoPick::Vulkan(adapter),
        None => AutoPick::Cpu,
    }
}

/// The best hardware adapter (discrete, then integrated, then virtual), if any.
pub fn best_gpu_adapter(adapters: &[VulkanAdapter]) -> Option<&VulkanAdapter> {
    adapters
        .iter()
        .filter(|adapter| adapter.is_gpu())
        .min_by_key(|adapter| adapter.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vulkan::AdapterKind;

    fn adapter(name: &str, kind: AdapterKind) -> VulkanAdapter {
        VulkanAdapter {
            name: name.to_owned(),
            kind,
            driver: String::new(),
            backend: "vulkan".to_owned(),
        }
    }

    #[test]
    fn cuda_then_a_vulkan_gpu_then_the_cpu() {
        let radeon = adapter("AMD Radeon RX 7900 XTX", AdapterKind::Discrete);
        let intel = adapter("Intel(R) Graphics", AdapterKind::Integrated);
        let adapters = [intel.clone(), radeon.clone()];
        assert_eq!(auto_pick(Some("H100"), &adapters), AutoPick::Cuda("H100"));
        assert_eq!(auto_pick(None::<()>, &adapters), AutoPick::Vulkan(&radeon));
        assert_eq!(
            auto_pick(None::<()>, &adapters[..1]),
            AutoPick::Vulkan(&intel)
        );
        assert_eq!(auto_pick(None::<()>, &[]), AutoPick::Cpu);
    }

    #[test]
    fn never_a_software_or_unknown_adapter() {
        let adapters = [
            adapter("llvmpipe (LLVM 15.0.6, 256 bits)", AdapterKind::Software),
            adapter("mystery", AdapterKind::Other),
        ];
        assert_eq!(auto_pick(None::<()>, &adapters), AutoPick::Cpu);
    }
}
