//! Where the batch-size finder should start, and the memory budget to give it.

use super::super::report::RamSummary;
use super::recommendation::{BatchAdvice, Recommendation};
use super::target::{Target, gpu_name};

const MIB: u64 = 1 << 20;
/// What to run, in every piece of advice: the finder on the user's own model (the
/// find_batch_size example shows it on a small MLP of its own).
const FINDER: &str = "search your model with kiln_ml_profile::BatchSizeFinder";

/// On a CUDA GPU: 90% of its memory; on the CPU: half the available RAM; on a Vulkan GPU the
/// budget is left to the user (wgpu does not report the memory).
pub(super) fn batch(target: Target<'_>, ram: &RamSummary) -> Recommendation<BatchAdvice> {
    let gpu_memory = match target {
        Target::Cuda(gpu) => gpu.memory_total_bytes.map(|total| (gpu, total / MIB)),
        Target::Vulkan(_) => None,
        Target::Cpu => {
            let budget = ram.available_bytes / MIB / 2;
            return Recommendation {
                value: BatchAdvice {
                    starting_batch_size: 32,
                    budget_mib: Some(budget),
                    advice: format!("{FINDER}: .budget_bytes({budget} << 20).start(32)"),
                },
                why: "half of the available RAM, leaving room for the loader's prefetch; on \
                      the CPU running out of memory aborts the process, so the finder must \
                      keep to a budget"
                    .to_owned(),
            };
        }
    };
    match gpu_memory {
        Some((gpu, total_mib)) => {
            let budget = total_mib * 9 / 10;
            let start = starting_batch_size(total_mib);
            Recommendation {
                value: BatchAdvice {
                    starting_batch_size: start,
                    budget_mib: Some(budget),
                    advice: format!("{FINDER}: .budget_bytes({budget} << 20).start({start})"),
                },
                why: format!(
                    "{} has {total_mib} MiB; the budget leaves 10% to the CUDA context and \
                     fragmentation, and {start} fits a mid-sized model in that memory",
                    gpu_name(gpu)
                ),
            }
        }
        None => Recommendation {
            value: BatchAdvice {
                starting_batch_size: 32,
                budget_mib: None,
                advice: format!("{FINDER}: .budget_bytes(90% of the GPU's memory).start(32)"),
            },
            why: "the GPU's memory is unknown here (wgpu does not report it), so the budget \
                  is yours to give"
                .to_owned(),
        },
    }
}

/// A first batch size by device memory: one that fits a mid-sized model (tens of millions of
/// parameters, short sequences) with room to grow; the finder corrects it either way.
fn starting_batch_size(memory_mib: u64) -> usize {
    match memory_mib / 1024 {
        0..6 => 16,
        6..12 => 32,
        12..24 => 64,
        24..48 => 128,
        _ => 256,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{adapter, advise, gpu};
    use super::*;
    use kiln_ml_device::AdapterKind;

    #[test]
    fn a_t4_starts_at_64_with_90_percent_of_its_memory() {
        let t4 = advise(&[gpu("Tesla T4", (7, 5), 16)], &[], &["flex", "cuda"]);
        assert_eq!(t4.batch.value.starting_batch_size, 64);
        assert_eq!(t4.batch.value.budget_mib, Some(16 * 1024 * 9 / 10));
    }

    #[test]
    fn a_vulkan_gpu_leaves_the_budget_to_the_user() {
        let radeon = adapter("AMD Radeon RX 7900 XTX", AdapterKind::Discrete);
        let advice = advise(&[], &[radeon], &["flex", "wgpu"]);
        assert_eq!(advice.batch.value.budget_mib, None);
        assert!(advice.batch.value.advice.contains("90%"));
    }

    #[test]
    fn starting_batch_sizes_grow_with_memory() {
        assert_eq!(starting_batch_size(4 * 1024), 16);
        assert_eq!(starting_batch_size(8 * 1024), 32);
        assert_eq!(starting_batch_size(24 * 1024), 128);
        assert_eq!(starting_batch_size(141 * 1024), 256);
    }
}
