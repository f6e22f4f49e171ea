//! How hard a GPU backend tunes its kernels: the value a training preset chooses and the
//! backend setup applies.

use std::fmt;
use std::str::FromStr;

/// How finely a GPU backend (Burn's CubeCL runtimes: CUDA, wgpu) autotunes its kernels.
///
/// Every level tries the same candidate kernels for a new problem; the level sets how finely
/// problem sizes are told apart. A coarse level tunes once for a range of sizes (fewer tuning
/// runs when shapes vary, such as variable-size batches); a fine one tunes every size on its
/// own (the best kernel for each, at the cost of more tuning on the first steps). Results are
/// cached on disk, so a level costs its tuning once per device and shape.
///
/// ```
/// use kiln_ml_core::AutotuneLevel;
///
/// assert_eq!("minimal".parse::<AutotuneLevel>(), Ok(AutotuneLevel::Minimal));
/// assert_eq!(AutotuneLevel::default(), AutotuneLevel::Balanced);
/// assert_eq!(AutotuneLevel::Full.to_string(), "full");
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AutotuneLevel {
    /// Coarsest: one tuning for the widest range of sizes.
    Minimal,
    /// CubeCL's default.
    #[default]
    Balanced,
    /// Finer ranges of sizes.
    Extensive,
    /// Every size tuned on its own.
    Full,
}

impl AutotuneLevel {
    /// Every level, coarsest first.
    pub const ALL: [AutotuneLevel; 4] = [
        AutotuneLevel::Minimal,
        AutotuneLevel::Balanced,
        AutotuneLevel::Extensive,
        AutotuneLevel::Full,
    ];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            AutotuneLevel::Minimal => "minimal",
            AutotuneLevel::Balanced => "balanced",
            AutotuneLevel::Extensive => "extensive",
            AutotuneLevel::Full => "full",
        }
    }
}

impl fmt::Display for AutotuneLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AutotuneLevel {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let wanted = text.trim().to_ascii_lowercase();
        AutotuneLevel::ALL
            .into_iter()
            .find(|level| level.name() == wanted)
            .ok_or_else(|| {
                format!("unknown autotune level {text:?}: use minimal, balanced, extensive or full")
            })
    }
}
