//! The preset and the training precision: mixed precision where the device has the tensor
//! cores for it, f32 elsewhere.

use super::recommendation::Recommendation;
use super::target::{Target, gpu_name};

/// `balanced` on a GPU, `reproducible` (f32) on the CPU.
pub(super) fn preset(target: Target<'_>) -> Recommendation<String> {
    let (value, why) = match target {
        Target::Cuda(_) | Target::Vulkan(_) => (
            "balanced",
            "mixed precision with grad-norm tracking, the usual start on a GPU; max_speed drops \
             the tracking once a run is known to be healthy",
        ),
        Target::Cpu => (
            "reproducible",
            "f32 with grad-norm tracking: on the CPU balanced and max_speed would run \
             bf16-mixed, which flex emulates more slowly than f32",
        ),
    };
    Recommendation {
        value: value.to_owned(),
        why: why.to_owned(),
    }
}

/// By compute capability on CUDA, f16 on a Vulkan GPU, f32 on the CPU (naming a faster device
/// the build passed over).
pub(super) fn precision(target: Target<'_>, passed_over: Option<&str>) -> Recommendation<String> {
    let (value, why) = match target {
        Target::Cuda(gpu) => {
            let name = gpu_name(gpu);
            match gpu.cuda_compute_capability {
                Some((major, minor)) if major >= 8 => (
                    "bf16_mixed",
                    format!(
                        "{name} (compute capability {major}.{minor}) has bf16 tensor cores, and \
                         bf16 keeps f32's range, so no loss scaling"
                    ),
                ),
                Some((major, minor)) if major >= 7 => (
                    "f16_mixed",
                    format!(
                        "{name} (compute capability {major}.{minor}) has f16 tensor cores but \
                         no bf16 (that needs 8.0); f16-mixed runs with dynamic loss scaling"
                    ),
                ),
                Some((major, minor)) => (
                    "f32",
                    format!(
                        "{name} (compute capability {major}.{minor}) has no tensor cores, so \
                         mixed precision gains little"
                    ),
                ),
                None => (
                    "f32",
                    format!(
                        "NVML did not report {name}'s compute capability; Preset::config_for \
                         finds what the device supports"
                    ),
                ),
            }
        }
        Target::Vulkan(adapter) => (
            "f16_mixed",
            format!(
                "{} ({}) through wgpu: f16 where the driver has shaderFloat16 \
                 (Preset::config_for falls back to f32 otherwise); Vulkan drivers rarely offer \
                 bf16",
                adapter.name,
                adapter.kind.name()
            ),
        ),
        Target::Cpu => {
            let mut why = "training on the CPU (flex): f16 and bf16 work there but are \
                           emulated, slower than f32"
                .to_owned();
            if let Some(note) = passed_over {
                why = format!("{why}; {note}");
            }
            ("f32", why)
        }
    };
    Recommendation {
        value: value.to_owned(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{adapter, advise, gpu};
    use kiln_ml_device::AdapterKind;

    #[test]
    fn a_t4_gets_f16_and_a_pascal_card_f32() {
        let t4 = advise(&[gpu("Tesla T4", (7, 5), 16)], &[], &["flex", "cuda"]);
        assert_eq!(t4.precision.value, "f16_mixed");
        let pascal = advise(
            &[gpu("GeForce GTX 1080", (6, 1), 8)],
            &[],
            &["flex", "cuda"],
        );
        assert_eq!(pascal.precision.value, "f32");
    }

    #[test]
    fn a_gpu_the_build_cannot_use_is_named_in_the_reason() {
        let advice = advise(
            &[gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)],
            &[],
            &["flex", "wgpu"],
        );
        assert_eq!(advice.precision.value, "f32");
        assert_eq!(advice.preset.value, "reproducible");
        assert!(
            advice.precision.why.contains("`cuda` feature"),
            "{}",
            advice.precision.why
        );
    }

    #[test]
    fn vulkan_gpus_get_f16_but_software_adapters_do_not() {
        let lavapipe = adapter("llvmpipe (LLVM 15.0.6, 256 bits)", AdapterKind::Software);
        let radeon = adapter("AMD Radeon RX 7900 XTX", AdapterKind::Discrete);
        let gpu = advise(&[], &[lavapipe.clone(), radeon], &["flex", "wgpu"]);
        assert_eq!(gpu.precision.value, "f16_mixed");
        assert!(gpu.precision.why.contains("Radeon"));
        let software = advise(&[], &[lavapipe], &["flex", "wgpu"]);
        assert_eq!(software.precision.value, "f32");
        assert!(
            software.precision.why.contains("llvmpipe"),
            "{}",
            software.precision.why
        );
    }
}
