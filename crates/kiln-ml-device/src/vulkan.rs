//! Vulkan adapters as wgpu lists them, without creating a device or starting Burn's wgpu
//! runtime (which asks for an adapter lazily and panics on a device thread when there is none).

use serde::{Deserialize, Serialize};

/// A Vulkan adapter as wgpu lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VulkanAdapter {
    /// The adapter's name (`NVIDIA GeForce RTX 4090`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// What kind of device it is.
    #[serde(rename = "device_type")]
    pub kind: AdapterKind,
    /// The driver's name and version, as far as the driver says.
    pub driver: String,
    /// The graphics API wgpu reached it through (`vulkan`).
    pub backend: String,
}

impl VulkanAdapter {
    /// A real GPU (discrete, integrated or virtual), as opposed to a driver that runs on the
    /// CPU or one that does not say what it is.
    pub fn is_gpu(&self) -> bool {
        self.kind.is_gpu()
    }
}

/// The kind of a Vulkan adapter, best first (the order [`vulkan_adapters`] sorts by). In JSON
/// by Vulkan's names: `discrete_gpu`, `integrated_gpu`, `virtual_gpu`, `cpu`, `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AdapterKind {
    /// A discrete GPU.
    #[serde(rename = "discrete_gpu")]
    Discrete,
    /// A GPU integrated with the CPU.
    #[serde(rename = "integrated_gpu")]
    Integrated,
    /// A virtualized GPU.
    #[serde(rename = "virtual_gpu")]
    Virtual,
    /// A driver that runs on the CPU (Mesa's lavapipe/llvmpipe, SwiftShader): slower than
    /// flex on the same CPU.
    #[serde(rename = "cpu")]
    Software,
    /// The driver did not say.
    #[serde(rename = "other")]
    Other,
}

impl AdapterKind {
    /// Vulkan's name for the kind, as in JSON (`discrete_gpu`, ..., `cpu`, `other`).
    pub fn name(self) -> &'static str {
        match self {
            AdapterKind::Discrete => "discrete_gpu",
            AdapterKind::Integrated => "integrated_gpu",
            AdapterKind::Virtual => "virtual_gpu",
            AdapterKind::Software => "cpu",
            AdapterKind::Other => "other",
        }
    }

    /// A real GPU: discrete, integrated or virtual.
    pub fn is_gpu(self) -> bool {
        matches!(
            self,
            AdapterKind::Discrete | AdapterKind::Integrated | AdapterKind::Virtual
        )
    }
}

/// Whether a Vulkan adapter can be used through wgpu, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VulkanStatus {
    /// The best adapter found (hardware before software).
    Available {
        /// The adapter's name, as the driver reports it.
        adapter: String,
        /// What kind of device it is.
        kind: AdapterKind,
    },
    /// No adapter can be used.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

/// Why no adapter is listed when wgpu finds none.
#[cfg(feature = "wgpu")]
const NO_ADAPTER: &str =
    "no Vulkan adapter found (install a Vulkan driver; Mesa's lavapipe runs on the CPU)";

/// Every Vulkan adapter, hardware and software, best kind first; or why none can be listed
/// (no driver, or kiln built without the `wgpu` feature).
pub fn vulkan_adapters() -> Result<Vec<VulkanAdapter>, String> {
    #[cfg(feature = "wgpu")]
    {
        let mut adapters = enumerate();
        if adapters.is_empty() {
            return Err(NO_ADAPTER.to_owned());
        }
        adapters.sort_by_key(|adapter| adapter.kind);
        Ok(adapters)
    }
    #[cfg(not(feature = "wgpu"))]
    {
        Err("kiln was built without the `wgpu` feature".to_owned())
    }
}

/// The best Vulkan adapter of any kind (a software one included), or why there is none.
pub fn vulkan_status() -> VulkanStatus {
    match vulkan_adapters() {
        Ok(adapters) => {
            let best = adapters.into_iter().next().expect("listed adapters");
            VulkanStatus::Available {
                adapter: best.name,
                kind: best.kind,
            }
        }
        Err(reason) => VulkanStatus::Unavailable { reason },
    }
}

/// Burn's wgpu device for the first adapter of `kind`, as Burn's runtime numbers them.
#[cfg(feature = "wgpu")]
pub fn wgpu_device(kind: AdapterKind) -> burn::backend::wgpu::WgpuDevice {
    use burn::backend::wgpu::WgpuDevice;
    match kind {
        AdapterKind::Discrete => WgpuDevice::DiscreteGpu(0),
        AdapterKind::Integrated => WgpuDevice::IntegratedGpu(0),
        AdapterKind::Virtual => WgpuDevice::VirtualGpu(0),
        AdapterKind::Software => WgpuDevice::Cpu,
        AdapterKind::Other => WgpuDevice::DefaultDevice,
    }
}

#[cfg(feature = "wgpu")]
fn enumerate() -> Vec<VulkanAdapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters =
        futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    adapters
        .iter()
        .map(|adapter| {
            let info = adapter.get_info();
            let kind = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => AdapterKind::Discrete,
                wgpu::DeviceType::IntegratedGpu => AdapterKind::Integrated,
                wgpu::DeviceType::VirtualGpu => AdapterKind::Virtual,
                wgpu::DeviceType::Cpu => AdapterKind::Software,
                wgpu::DeviceType::Other => AdapterKind::Other,
            };
            let driver = [info.driver.as_str(), info.driver_info.as_str()]
                .into_iter()
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            VulkanAdapter {
                name: info.name,
                kind,
                driver,
                backend: info.backend.to_str().to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapters_best_first_or_a_reason() {
        match vulkan_adapters() {
            Ok(adapters) => {
                assert!(!adapters.is_empty());
                assert!(adapters.windows(2).all(|pair| pair[0].kind <= pair[1].kind));
            }
            Err(reason) => {
                assert!(!reason.is_empty());
                // CI installs lavapipe and says so: there, no adapter is a failure.
                #[cfg(feature = "wgpu")]
                assert!(
                    std::env::var("KILN_REQUIRE_GPU").as_deref() != Ok("1"),
                    "KILN_REQUIRE_GPU=1 but no Vulkan adapter: {reason}"
                );
            }
        }
        #[cfg(not(feature = "wgpu"))]
        assert!(vulkan_adapters().unwrap_err().contains("`wgpu` feature"));
    }

    #[test]
    fn kinds_keep_vulkans_names_in_json() {
        let adapter = VulkanAdapter {
            name: "llvmpipe".to_owned(),
            kind: AdapterKind::Software,
            driver: "Mesa".to_owned(),
            backend: "vulkan".to_owned(),
        };
        let json = serde_json::to_value(&adapter).unwrap();
        assert_eq!(json["device_type"], "cpu");
        assert_eq!(json["device_type"], adapter.kind.name());
        assert!(!adapter.is_gpu() && AdapterKind::Integrated.is_gpu());
        let back: VulkanAdapter = serde_json::from_value(json).unwrap();
        assert_eq!(back, adapter);
    }
}
