//! How many loader worker threads to start with.

use super::super::report::CpuSummary;
use super::recommendation::Recommendation;

/// The most workers recommended: beyond it the loader rarely gets faster.
const MAX_WORKERS: usize = 8;

/// One worker per usable physical core but one (left to the training thread), from 1 to 8.
pub(super) fn loader_workers(cpu: &CpuSummary) -> Recommendation<usize> {
    // Physical cores, not hardware threads: decoding competes for the same execution units;
    // and never more than this process may use.
    let cores = cpu.physical_cores.min(cpu.available_cores).max(1);
    if cores == 1 {
        // kiln-ml-data's `LoaderConfig::validate` refuses 0 workers: there is no loading on the
        // training thread to fall back to.
        return Recommendation {
            value: 1,
            why: "one usable core: kiln's LoaderConfig needs at least 1 worker, so it shares \
                  the core with training; the profile's data_wait shows what that costs"
                .to_owned(),
        };
    }
    let workers = (cores - 1).min(MAX_WORKERS);
    let why = if cores - 1 > MAX_WORKERS {
        format!(
            "{cores} usable cores: beyond {MAX_WORKERS} workers the loader rarely gets faster; \
             LoaderTuner measures the best count for your data"
        )
    } else {
        format!(
            "{cores} usable cores, one left to the training thread; LoaderTuner measures the \
             best count for your data"
        )
    };
    Recommendation {
        value: workers,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::cpu;
    use super::*;

    #[test]
    fn loader_workers_leave_a_core_to_training() {
        let workers = |physical, available| loader_workers(&cpu(physical, available)).value;
        assert_eq!(workers(2, 2), 1);
        assert_eq!(workers(4, 4), 3);
        assert_eq!(workers(64, 64), 8);
        // A container's quota counts, not the host's cores.
        assert_eq!(workers(64, 2), 1);
    }

    #[test]
    fn one_core_still_gets_the_one_worker_the_loader_needs() {
        for (physical, available) in [(1, 1), (8, 1), (0, 0)] {
            let advice = loader_workers(&cpu(physical, available));
            assert_eq!(
                advice.value, 1,
                "{physical} physical, {available} available"
            );
            assert!(advice.why.contains("at least 1 worker"), "{}", advice.why);
        }
    }
}
