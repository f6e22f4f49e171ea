//! The Vulkan adapters as kiln-ml-device lists them, as a source of the doctor's report.

use kiln_ml_device::{VulkanAdapter, vulkan_adapters};

use crate::monitor::SourceStatus;

/// The source name in [`SourceStatus`].
const NAME: &str = "vulkan";

/// Every Vulkan adapter, hardware and software, or why none can be listed.
pub(super) fn adapters() -> (SourceStatus, Vec<VulkanAdapter>) {
    match vulkan_adapters() {
        Ok(adapters) => {
            let detail = format!("{} adapter(s)", adapters.len());
            (SourceStatus::available(NAME, Some(detail)), adapters)
        }
        Err(reason) => (SourceStatus::unavailable(NAME, reason), Vec::new()),
    }
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
            // CI installs lavapipe and says so: there, no adapter is a failure.
            #[cfg(feature = "wgpu")]
            assert!(
                std::env::var(kiln_ml_testkit::REQUIRE_GPU).as_deref() != Ok("1"),
                "{}=1 but no Vulkan adapter: {:?}",
                kiln_ml_testkit::REQUIRE_GPU,
                status.reason
            );
            assert!(status.reason.is_some_and(|reason| !reason.is_empty()));
        }
        #[cfg(not(feature = "wgpu"))]
        assert!(!status.available);
    }
}
