//! The one function that puts the doctor's four recommendations together.

use kiln_ml_device::VulkanAdapter;

use super::super::report::{CpuSummary, RamSummary};
use super::batch::batch;
use super::precision::{precision, preset};
use super::recommendation::Recommendations;
use super::target::target;
use super::workers::loader_workers;
use crate::monitor::GpuInfo;

/// All four recommendations for a machine, for training where
/// `kiln_ml::backend::select(DevicePreference::Auto)` would put it with `backends` built in.
pub(crate) fn recommend(
    cpu: &CpuSummary,
    ram: &RamSummary,
    gpus: &[GpuInfo],
    adapters: &[VulkanAdapter],
    backends: &[String],
) -> Recommendations {
    let (target, passed_over) = target(gpus, adapters, backends);
    Recommendations {
        preset: preset(target),
        precision: precision(target, passed_over.as_deref()),
        loader_workers: loader_workers(cpu),
        batch: batch(target, ram),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{advise, gpu};

    #[test]
    fn an_h100_gets_bf16_the_balanced_preset_and_a_large_budget() {
        let advice = advise(
            &[gpu("NVIDIA H100 80GB HBM3", (9, 0), 80)],
            &[],
            &["flex", "cuda"],
        );
        assert_eq!(advice.precision.value, "bf16_mixed");
        assert!(
            advice.precision.why.contains("9.0"),
            "{}",
            advice.precision.why
        );
        assert_eq!(advice.preset.value, "balanced");
        assert_eq!(advice.batch.value.starting_batch_size, 256);
        assert_eq!(advice.batch.value.budget_mib, Some(80 * 1024 * 9 / 10));
        assert!(
            (advice.batch.value.advice).contains(".budget_bytes(73728 << 20).start(256)"),
            "{}",
            advice.batch.value.advice
        );
        assert_eq!(advice.loader_workers.value, 8);
    }

    #[test]
    fn the_cpu_gets_f32_the_reproducible_preset_and_half_the_ram() {
        let advice = advise(&[], &[], &["flex"]);
        assert_eq!(advice.precision.value, "f32");
        assert_eq!(advice.preset.value, "reproducible");
        assert_eq!(advice.batch.value.budget_mib, Some(16 * 1024));
    }

    #[test]
    fn the_budget_serializes_in_mib() {
        let advice = advise(&[], &[], &["flex"]);
        let json = serde_json::to_value(&advice).expect("serializes");
        assert_eq!(json["batch"]["value"]["budget_mib"], 16 * 1024);
    }
}
