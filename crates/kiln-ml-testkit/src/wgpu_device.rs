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

/// The best Vulkan adapter (real GPUs before CPU drivers) as Burn's device, with its name.
pub fn vulkan_adapter() -> Result<(WgpuDevice, String), String> {
    let best = kiln_ml_device::vulkan_adapters()?
        .into_iter()
        .next()
        .expect("listed adapters");
    Ok((kiln_ml_device::wgpu_device(best.kind), best.name))
}
