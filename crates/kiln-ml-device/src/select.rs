//! Choosing the device for a preference, with the reason for each step.

use crate::auto::{AutoPick, auto_pick};
use crate::cuda::{CudaStatus, cuda_status};
use crate::gpu_tuning::{GpuTuning, GpuTuningError};
use crate::preference::DevicePreference;
use crate::select_error::SelectError;
use crate::selection::Selection;
use crate::vulkan::vulkan_adapters;

/// Picks the device for a preference. [`DevicePreference::Cuda`] and
/// [`DevicePreference::Wgpu`] fail when that device cannot be used; `Auto` and `Cpu` never
/// fail for want of a device, and the selection says why each faster choice was passed over.
/// A `KILN_AUTOTUNE_LEVEL` that names no level fails every preference, so a command refused on
/// a GPU machine is refused on every machine.
///
/// When it picks a GPU, it makes [`GpuTuning::from_env`] CubeCL's settings (cache directory,
/// autotune level, kernel log) unless settings were applied before (by the caller, kept; by
/// CubeCL itself, because a GPU device or tensor was made first: a warning says kiln's were not
/// applied).
pub fn select(preference: DevicePreference) -> Result<Selection, SelectError> {
    let tuning = GpuTuning::from_env().map_err(SelectError::GpuTuning)?;
    let (selection, gpu_model) = choose(preference)?;
    if let Some(model) = gpu_model {
        match tuning.for_device(&model).apply() {
            // Applied now, or by the caller before: the GPU runs with kiln's settings.
            Ok(_) => {}
            Err(GpuTuningError::AlreadyConfigured { .. }) if GpuTuning::applied().is_some() => {}
            Err(GpuTuningError::AlreadyConfigured { by }) => log::warn!(
                "kiln's GPU settings (kernel cache, autotune level, kernel log) were not applied: \
                 {by}; select the device before making any GPU tensor"
            ),
            Err(error) => return Err(SelectError::GpuTuning(error)),
        }
    }
    Ok(selection)
}

/// The choice of [`select`] before any setting is applied, with the chosen GPU's model (what
/// its compiled kernels are kept under), from the probe that found it.
fn choose(preference: DevicePreference) -> Choice {
    match preference {
        // Answered without probing: the CPU needs no driver, and `cuInit` can take seconds.
        DevicePreference::Cpu => Ok((cpu("requested".to_owned()), None)),
        DevicePreference::Cuda => match cuda_status() {
            CudaStatus::Available { name, .. } => on_cuda(name),
            CudaStatus::Unavailable { reason } => Err(SelectError::CudaUnavailable { reason }),
        },
        DevicePreference::Wgpu => match vulkan_adapters() {
            // The best adapter of any kind: asked for by name, lavapipe is a fine answer.
            Ok(adapters) => on_wgpu(&adapters[0], "requested".to_owned()),
            Err(reason) => Err(SelectError::WgpuUnavailable { reason }),
        },
        DevicePreference::Auto => {
            let (cuda, no_cuda) = match cuda_status() {
                CudaStatus::Available { name, .. } => (Some(name), String::new()),
                CudaStatus::Unavailable { reason } => (None, reason),
            };
            // Vulkan is probed only when CUDA is not there to take.
            let adapters = if cuda.is_some() {
                Ok(Vec::new())
            } else {
                vulkan_adapters()
            };
            let listed = adapters.as_deref().unwrap_or_default();
            match auto_pick(cuda, listed) {
                AutoPick::Cuda(name) => on_cuda(name),
                AutoPick::Vulkan(adapter) => on_wgpu(adapter, format!("no CUDA: {no_cuda}")),
                AutoPick::Cpu => {
                    let no_vulkan = match (&adapters, listed.first()) {
                        (Err(reason), _) => reason.clone(),
                        (Ok(_), Some(adapter)) => format!(
                            "only a software Vulkan adapter ({}), slower than flex on the same \
                             CPU; ask for it with the `wgpu` device",
                            adapter.name
                        ),
                        (Ok(_), None) => "no Vulkan adapter found".to_owned(),
                    };
                    let reason = format!("no CUDA: {no_cuda}; no Vulkan GPU: {no_vulkan}");
                    Ok((cpu(reason), None))
                }
            }
        }
    }
}

fn cpu(reason: String) -> Selection {
    Selection::Cpu { reason }
}

/// A selection with the chosen GPU's model (what its compiled kernels are kept under), or why the
/// device asked for cannot be used.
type Choice = Result<(Selection, Option<String>), SelectError>;

/// The CUDA device the probe found, or (in a build without the `cuda` feature, whose probe finds
/// none) the reason it cannot be selected.
#[cfg(feature = "cuda")]
fn on_cuda(name: String) -> Choice {
    Ok((Selection::Cuda { index: 0 }, Some(format!("cuda {name}"))))
}

#[cfg(not(feature = "cuda"))]
fn on_cuda(_name: String) -> Choice {
    Err(SelectError::CudaUnavailable {
        reason: "kiln was built without the `cuda` feature".to_owned(),
    })
}

/// The adapter the probe found, or (in a build without the `wgpu` feature, whose probe lists
/// none) the reason it cannot be selected.
#[cfg(feature = "wgpu")]
fn on_wgpu(adapter: &crate::vulkan::VulkanAdapter, reason: String) -> Choice {
    let model = Some(format!("vulkan {}", adapter.name));
    let selection = Selection::Wgpu {
        adapter: adapter.name.clone(),
        kind: adapter.kind,
        reason,
    };
    Ok((selection, model))
}

#[cfg(not(feature = "wgpu"))]
fn on_wgpu(_adapter: &crate::vulkan::VulkanAdapter, _reason: String) -> Choice {
    Err(SelectError::WgpuUnavailable {
        reason: "kiln was built without the `wgpu` feature".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vulkan::{VulkanStatus, vulkan_status};

    #[test]
    fn cpu_is_always_selectable() {
        assert_eq!(select(DevicePreference::Cpu).unwrap().name(), "cpu");
    }

    #[test]
    fn selection_tries_cuda_then_a_vulkan_gpu_then_cpu_and_explains() {
        let auto = select(DevicePreference::Auto).unwrap();
        let cuda = cuda_status();
        let gpu_adapter = vulkan_adapters()
            .ok()
            .and_then(|adapters| adapters.into_iter().find(|adapter| adapter.is_gpu()));
        match (&cuda, &gpu_adapter) {
            (CudaStatus::Available { .. }, _) => assert_eq!(auto.name(), "cuda:0"),
            (CudaStatus::Unavailable { .. }, Some(adapter)) => {
                assert_eq!(auto.name(), format!("wgpu: {}", adapter.name))
            }
            (CudaStatus::Unavailable { reason }, None) => {
                assert_eq!(auto.name(), "cpu");
                // The Display of the CPU selection is its reason, which quotes the probes'.
                let why = auto.to_string();
                assert!(why.contains(reason.as_str()), "{why}");
            }
        }
        if let CudaStatus::Unavailable { reason } = cuda {
            let error = select(DevicePreference::Cuda).unwrap_err();
            assert_eq!(error, SelectError::CudaUnavailable { reason });
        }
        match vulkan_status() {
            VulkanStatus::Unavailable { reason } => {
                let error = select(DevicePreference::Wgpu).unwrap_err();
                assert_eq!(error, SelectError::WgpuUnavailable { reason });
            }
            VulkanStatus::Available { adapter, .. } => {
                let chosen = select(DevicePreference::Wgpu).unwrap();
                assert_eq!(chosen.name(), format!("wgpu: {adapter}"));
            }
        }
    }
}
