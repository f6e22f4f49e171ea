//! Vulkan adapters as wgpu lists them, without creating a device (the `wgpu` feature).

use super::report::VulkanAdapter;
use crate::monitor::SourceStatus;

/// The source name in [`SourceStatus`].
const NAME: &str = "vulkan";

/// Every Vulkan adapter, hardware and software, or why none can be listed.
pub(super) fn adapters() -> (SourceStatus, Vec<VulkanAdapter>) {
    #[cfg(feature = "wgpu")]
    {
        let adapters = enumerate();
        if adapters.is_empty() {
            let reason = "no Vulkan adapter found (install a Vulkan driver; Mesa's lavapipe runs \
                          on the CPU)";
            return (SourceStatus::unavailable(NAME, reason), adapters);
        }
        let detail = format!("{} adapter(s)", adapters.len());
        (SourceStatus::available(NAME, Some(detail)), adapters)
    }
    #[cfg(not(feature = "wgpu"))]
    {
        let reason = "built without the `wgpu` feature";
        (SourceStatus::unavailable(NAME, reason), Vec::new())
    }
}

#[cfg(feature = "wgpu")]
fn enumerate() -> Vec<VulkanAdapter> {
    use super::report::VulkanDeviceType;

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
            let device_type = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => VulkanDeviceType::DiscreteGpu,
                wgpu::DeviceType::IntegratedGpu => VulkanDeviceType::IntegratedGpu,
                wgpu::DeviceType::VirtualGpu => VulkanDeviceType::VirtualGpu,
                wgpu::DeviceType::Cpu => VulkanDeviceType::Cpu,
                wgpu::DeviceType::Other => VulkanDeviceType::Other,
            };
            let driver = [info.driver.as_str(), info.driver_info.as_str()]
                .into_iter()
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            VulkanAdapter {
                name: info.name,
                device_type,
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
    fn the_adapters_or_a_reason() {
        let (status, adapters) = adapters();
        assert_eq!(status.name, NAME);
        if status.available {
            assert!(!adapters.is_empty());
        } else {
            assert!(adapters.is_empty());
            assert!(status.reason.is_some_and(|reason| !reason.is_empty()));
        }
        #[cfg(not(feature = "wgpu"))]
        assert!(!status.available);
    }
}
