//! What the doctor recommends: each setting with the reason for it.

use serde::{Deserialize, Serialize};

/// Settings to start from, each with the reason for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendations {
    /// The kiln-ml-train preset (`Preset::from_str` reads the name): `balanced` on a GPU,
    /// `reproducible` (f32) on the CPU.
    pub preset: Recommendation<String>,
    /// The training precision, as kiln-ml-train's `Precision::name` spells it: `bf16_mixed`,
    /// `f16_mixed` or `f32`.
    pub precision: Recommendation<String>,
    /// Loader worker threads: at least 1, which kiln-ml-data's `LoaderConfig` requires.
    pub loader_workers: Recommendation<usize>,
    /// How to find the batch size, and where to start.
    pub batch: Recommendation<BatchAdvice>,
}

/// One piece of advice: the value and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation<T> {
    /// What to use.
    pub value: T,
    /// Why, in one line.
    pub why: String,
}

/// Where to start looking for the batch size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAdvice {
    /// A batch size that fits a mid-sized model in this much memory: the finder's start.
    pub starting_batch_size: usize,
    /// The memory budget to give the finder, in MiB (`None` where the device's memory is
    /// unknown).
    pub budget_mib: Option<u64>,
    /// What to run.
    pub advice: String,
}
