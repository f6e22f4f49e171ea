//! The device of the GPU-style test tier: Burn's wgpu backend on a Vulkan adapter (a real GPU,
//! or Mesa's lavapipe, a conforming Vulkan driver that runs on the CPU).

use burn::backend::wgpu::WgpuDevice;

/// The environment variable that turns a missing Vulkan adapter from a skip into a failure
/// (CI's GPU tier sets it to `1`).
pub const REQUIRE_GPU: &str = "KILN_REQUIRE_GPU";

/// The wgpu device for a test, or `None` (with a note on stderr) when no Vulkan adapter
/// answers.
///
/// # Panics
///
/// When no adapter answers and [`REQUIRE_GPU`] is `1`: a GPU tier that silently skips
/// would prove nothing.
pub fn wgpu_device() -> Option<WgpuDevice> {
    match vulkan_adapter() {
        Ok((device, _name)) => Some(device),
        Err(reason) if std::env::var(REQUIRE_GPU).as_deref() == Ok("1") => {
            panic!("{REQUIRE_GPU}=1 but no Vulkan adapter can be used: {reason}")
        }
        Err(reason) => {
            eprintln!(
                "skipped on wgpu: {reason} (install a Vulkan driver, for example Mesa's lavapipe)"
            );
            None
        }
    }
}

/// The first Vulkan adapter and its name, preferring real GPUs to CPU adapters.
pub fn vulkan_adapter() -> Result<(WgpuDevice, String), String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters =
        futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let infos: Vec<wgpu::AdapterInfo> = adapters.iter().map(|adapter| adapter.get_info()).collect();
    let rank = |kind: wgpu::DeviceType| match kind {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let best = infos
        .iter()
        .min_by_key(|info| rank(info.device_type))
        .ok_or_else(|| "no Vulkan adapter found".to_owned())?;
    let device = match best.device_type {
        wgpu::DeviceType::DiscreteGpu => WgpuDevice::DiscreteGpu(0),
        wgpu::DeviceType::IntegratedGpu => WgpuDevice::IntegratedGpu(0),
        wgpu::DeviceType::VirtualGpu => WgpuDevice::VirtualGpu(0),
        wgpu::DeviceType::Cpu => WgpuDevice::Cpu,
        wgpu::DeviceType::Other => WgpuDevice::DefaultDevice,
    };
    Ok((device, best.name.clone()))
}
