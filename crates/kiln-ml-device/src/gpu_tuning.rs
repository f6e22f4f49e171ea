//! Where Burn's GPU runtimes (CubeCL: CUDA and wgpu) keep their autotune results and compiled
//! kernels, how hard they tune, and where they log what they compile.
//!
//! Left alone, CubeCL keeps its autotune cache in the `target/` folder of the Cargo project
//! found above the current directory (so a binary run from elsewhere tunes again on every
//! run), caches no compiled kernel, and logs nothing: the first training step compiles and
//! tunes for minutes in silence on a cold GPU. kiln chooses instead: a user cache directory
//! for both caches, the autotune level a training preset asks for
//! (`kiln_ml_train::Preset::autotune_level`), and a
//! log of every kernel compiled and every tuning run, which the trainer's slow-first-step
//! notice quotes.
//!
//! [`select`](crate::select) applies [`GpuTuning::from_env`] when it chooses a GPU;
//! apply your own before it (and before any device exists) to choose otherwise:
//!
//! ```no_run
//! use kiln_ml_core::AutotuneLevel;
//! use kiln_ml_device::{DevicePreference, GpuTuning, select};
//!
//! GpuTuning::from_env()
//!     .unwrap()
//!     .with_autotune_level(AutotuneLevel::Minimal)
//!     .apply()
//!     .unwrap();
//! let selection = select(DevicePreference::Auto).unwrap();
//! ```
//!
//! Burn's autotuning is compiled in only with kiln's `autotune` feature (off by default; see
//! [`GpuTuning::autotuning`]). With it, the first use of each new matrix-product shape compiles
//! and times every candidate kernel, one at a time: on an H200 the quickstart's first step was
//! still compiling after 5 minutes on a cold cache, against 7-9 s without it, and the untuned
//! kernels trained it as fast (docs/performance.md, "Third H200 session"). Without the feature
//! the autotune level changes nothing.
//!
//! Environment: `KILN_CACHE_DIR` moves kiln's cache root (default `$XDG_CACHE_HOME/kiln`, else
//! `~/.cache/kiln`); `KILN_AUTOTUNE_LEVEL` sets the level. CubeCL's own variables
//! (`CUBECL_AUTOTUNE_LEVEL`, `CUBECL_DEBUG_LOG`) still win over both.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kiln_ml_core::AutotuneLevel;

/// The settings applied, once per process.
static APPLIED: OnceLock<GpuTuning> = OnceLock::new();

/// CubeCL's process-wide settings as kiln chooses them: cache directory, autotune level,
/// kernel log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuTuning {
    cache_dir: PathBuf,
    autotune_level: AutotuneLevel,
    kernel_log: bool,
    /// Where CubeCL logs every kernel launch, if anywhere (see [`LaunchLog`](crate::LaunchLog)).
    launch_log: Option<PathBuf>,
    /// The device model the compiled kernels are for: CubeCL's kernel cache does not tell GPU
    /// architectures apart, so each model gets its own folder.
    device: Option<String>,
}

/// Why [`GpuTuning::apply`] could not apply its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuTuningError {
    /// CubeCL's settings were already read or set in this process (a GPU device was made, or
    /// settings were applied before): they cannot change any more.
    #[error(
        "CubeCL's settings were already fixed in this process (by {by}); apply kiln's GPU \
         settings before any GPU device or tensor is made"
    )]
    AlreadyConfigured {
        /// Who fixed them: kiln (with its settings) or CubeCL itself.
        by: String,
    },
    /// `KILN_AUTOTUNE_LEVEL` holds no level.
    #[error("KILN_AUTOTUNE_LEVEL: {0}")]
    BadLevel(String),
}

/// The level a `KILN_AUTOTUNE_LEVEL` value names: the default when it is unset or empty, an
/// error when it names none (bytes that are not text included).
fn autotune_level_from(
    value: Result<String, std::env::VarError>,
) -> Result<AutotuneLevel, GpuTuningError> {
    match value {
        Ok(text) if !text.trim().is_empty() => {
            text.trim().parse().map_err(GpuTuningError::BadLevel)
        }
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(AutotuneLevel::default()),
        Err(std::env::VarError::NotUnicode(bytes)) => {
            Err(GpuTuningError::BadLevel(format!("{bytes:?} is not text")))
        }
    }
}

impl GpuTuning {
    /// kiln's defaults: the cache root from the environment (see the module docs), CubeCL's
    /// default autotune level unless `KILN_AUTOTUNE_LEVEL` names one, and the kernel log on.
    /// Fails with [`GpuTuningError::BadLevel`] when `KILN_AUTOTUNE_LEVEL` names no level (an
    /// empty value is no setting, as an empty `KILN_CACHE_DIR` is).
    pub fn from_env() -> Result<Self, GpuTuningError> {
        let autotune_level = autotune_level_from(std::env::var("KILN_AUTOTUNE_LEVEL"))?;
        Ok(Self {
            cache_dir: default_cache_root().join("cubecl"),
            autotune_level,
            kernel_log: true,
            launch_log: None,
            device: None,
        })
    }

    /// Keeps the compiled kernels of `device` (a GPU model's name, such as `cuda NVIDIA H200`)
    /// apart from other models': [`select`](crate::select) names the one it chose.
    pub fn for_device(mut self, device: &str) -> Self {
        self.device = Some(device.to_owned());
        self
    }

    /// Where compiled kernels are kept: a folder per device model under the cache directory.
    /// Settings without a device model (applied before [`select`](crate::select) named one)
    /// keep no compiled kernel: CubeCL's kernel cache does not tell GPU architectures apart, so
    /// a shared `compiled/any` folder would hand one model's kernels to another.
    pub fn compiled_dir(&self) -> PathBuf {
        let model = self
            .device
            .as_deref()
            .map_or_else(|| "any".to_owned(), slug);
        self.cache_dir.join("compiled").join(model)
    }

    /// Keeps the autotune results and compiled kernels under `dir`.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = dir.into();
        self
    }

    /// Tunes at `level` (a training preset's `autotune_level()`).
    pub fn with_autotune_level(mut self, level: AutotuneLevel) -> Self {
        self.autotune_level = level;
        self
    }

    /// Logs every kernel compiled and every tuning run to [`kernel_log`](Self::kernel_log)
    /// (on by default).
    pub fn with_kernel_log(mut self, on: bool) -> Self {
        self.kernel_log = on;
        self
    }

    /// Logs every kernel launch to `path`, one `Executing NAME` line each (CubeCL's profiling
    /// logger at its minimal level), for [`LaunchLog`](crate::LaunchLog) to count. Off by
    /// default: a line written per launch slows the host down, so count in untimed runs.
    pub fn with_launch_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.launch_log = Some(path.into());
        self
    }

    /// The launch log's path, when it is on.
    pub fn launch_log(&self) -> Option<&Path> {
        self.launch_log.as_deref()
    }

    /// Where the caches live.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The autotune level.
    pub fn autotune_level(&self) -> AutotuneLevel {
        self.autotune_level
    }

    /// Whether kiln's `autotune` feature compiled Burn's kernel autotuning in. (Another crate
    /// of the build can turn Burn's `autotune` feature on by itself; kiln cannot see that.)
    pub fn autotuning() -> bool {
        cfg!(feature = "autotune")
    }

    /// Whether kernel compilations go to the kernel log (tuning runs always do, when it is on):
    /// not on a Vulkan device, where CubeCL's compilation log also turns on wgpu's debugging
    /// flags, and with them the Vulkan validation layers wherever they are installed, which slow
    /// every kernel launch. Settings applied before [`select`](crate::select) do not know the
    /// device: pass `with_kernel_log(false)` to them for a wgpu device.
    pub fn logs_compilation(&self) -> bool {
        self.kernel_log
            && !self
                .device
                .as_deref()
                .is_some_and(|device| device.starts_with("vulkan "))
    }

    /// The kernel log's path, when it is on: `kernels.log` in the cache directory.
    pub fn kernel_log(&self) -> Option<PathBuf> {
        self.kernel_log.then(|| self.cache_dir.join("kernels.log"))
    }

    /// The settings applied in this process, if any were.
    pub fn applied() -> Option<&'static GpuTuning> {
        APPLIED.get()
    }

    /// Makes these CubeCL's settings for the rest of the process. Call it before any GPU device
    /// or tensor exists; a second call, or one after CubeCL read its settings, fails with
    /// [`GpuTuningError::AlreadyConfigured`] and changes nothing.
    pub fn apply(self) -> Result<&'static GpuTuning, GpuTuningError> {
        if let Some(applied) = APPLIED.get() {
            return Err(GpuTuningError::AlreadyConfigured {
                by: format!("kiln, with cache {}", applied.cache_dir.display()),
            });
        }
        self.apply_to_cubecl()?;
        if let Some(log) = self.kernel_log() {
            // For the trainer's slow-first-step notice, which quotes the log's last line.
            kiln_ml_core::set_kernel_log(log);
        }
        Ok(APPLIED.get_or_init(|| self))
    }

    #[cfg(any(feature = "cuda", feature = "wgpu"))]
    fn apply_to_cubecl(&self) -> Result<(), GpuTuningError> {
        use cubecl::config::autotune::{AutotuneLevel as Level, AutotuneLogLevel};
        use cubecl::config::cache::CacheConfig;
        use cubecl::config::compilation::CompilationLogLevel;
        use cubecl::config::profiling::ProfilingLogLevel;
        use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

        // Checked before anything is made: a refused call creates no folder. CubeCL's own
        // first read builds its settings under this lock too.
        let mut storage = CubeClRuntimeConfig::storage().lock();
        if storage.is_some() {
            return Err(GpuTuningError::AlreadyConfigured {
                by: "CubeCL (a GPU device or tensor was made first)".to_owned(),
            });
        }
        // A cubecl.toml or burn.toml above the current directory is read first, then kiln's
        // choices, then CubeCL's environment variables, which win.
        let mut config = CubeClRuntimeConfig::from_current_dir();
        config.autotune.cache = CacheConfig::File(self.cache_dir.clone());
        // Compiled kernels are kept only under a known device model: CubeCL's kernel cache keys
        // them by kernel, not architecture, and one model's kernels fail on another.
        config.compilation.cache = self
            .device
            .is_some()
            .then(|| CacheConfig::File(self.compiled_dir()));
        config.autotune.level = match self.autotune_level {
            AutotuneLevel::Minimal => Level::Minimal,
            AutotuneLevel::Balanced => Level::Balanced,
            AutotuneLevel::Extensive => Level::Extensive,
            AutotuneLevel::Full => Level::Full,
        };
        if let Some(log) = self.kernel_log() {
            // The log's folder must exist for CubeCL to open it; a failure only loses the log.
            let _ = std::fs::create_dir_all(&self.cache_dir);
            if self.logs_compilation() {
                config.compilation.logger.level = CompilationLogLevel::Basic;
                config.compilation.logger.file = Some(log.clone());
            }
            config.autotune.logger.level = AutotuneLogLevel::Minimal;
            config.autotune.logger.file = Some(log);
        }
        if let Some(log) = &self.launch_log {
            if let Some(parent) = log.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            config.profiling.logger.level = ProfilingLogLevel::Minimal;
            config.profiling.logger.file = Some(log.clone());
        }
        let config = config.override_from_env();
        *storage = Some(std::sync::Arc::new(config));
        Ok(())
    }

    #[cfg(not(any(feature = "cuda", feature = "wgpu")))]
    fn apply_to_cubecl(&self) -> Result<(), GpuTuningError> {
        // Without a GPU backend there is no CubeCL runtime to configure.
        Ok(())
    }
}

impl std::fmt::Display for GpuTuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernel cache {}, ", self.cache_dir.display())?;
        if Self::autotuning() {
            write!(f, "autotune level {}", self.autotune_level)?;
        } else {
            write!(f, "no autotuning (kiln's `autotune` feature is off)")?;
        }
        if let Some(log) = self.kernel_log() {
            write!(f, ", kernel log {}", log.display())?;
        }
        if let Some(log) = &self.launch_log {
            write!(f, ", launch log {}", log.display())?;
        }
        Ok(())
    }
}

/// A folder name for a device model: lowercase letters and digits, runs of others as `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`, else a folder in the
/// temporary directory.
fn default_cache_root() -> PathBuf {
    let from = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = from("KILN_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = from("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("kiln");
    }
    if let Some(home) = from("HOME") {
        return PathBuf::from(home).join(".cache").join("kiln");
    }
    std::env::temp_dir().join("kiln-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(unix)]
    fn a_level_that_is_not_text_is_refused_like_any_unknown_one() {
        use std::env::VarError;
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let not_text = VarError::NotUnicode(OsString::from_vec(vec![0xff]));
        assert!(matches!(
            autotune_level_from(Err(not_text)),
            Err(GpuTuningError::BadLevel(_))
        ));
        assert!(autotune_level_from(Err(VarError::NotPresent)).is_ok());
        assert!(autotune_level_from(Ok("  ".to_owned())).is_ok());
        assert!(autotune_level_from(Ok("sideways".to_owned())).is_err());
    }

    /// CUDA devices log their compilations; Vulkan ones do not (it would turn wgpu's
    /// validation on); settings that know no device keep no compiled kernel.
    #[test]
    fn the_device_decides_the_compilation_log_and_cache() {
        let tuning = GpuTuning::from_env().unwrap();
        assert!(
            tuning
                .clone()
                .for_device("cuda NVIDIA H200")
                .logs_compilation()
        );
        assert!(
            !tuning
                .clone()
                .for_device("vulkan llvmpipe (LLVM 19.1.7, 256 bits)")
                .logs_compilation()
        );
        assert!(
            !tuning
                .clone()
                .for_device("cuda NVIDIA H200")
                .with_kernel_log(false)
                .logs_compilation()
        );
        assert!(tuning.logs_compilation());
        assert!(tuning.kernel_log().is_some());
    }

    #[test]
    fn settings_name_their_parts() {
        let tuning = GpuTuning::from_env()
            .unwrap()
            .with_cache_dir("/somewhere/kiln")
            .with_autotune_level(AutotuneLevel::Full);
        assert_eq!(tuning.cache_dir(), Path::new("/somewhere/kiln"));
        assert_eq!(
            tuning.kernel_log(),
            Some(PathBuf::from("/somewhere/kiln/kernels.log"))
        );
        let text = tuning.to_string();
        assert!(text.contains("/somewhere/kiln"), "{text}");
        assert_eq!(
            text.contains("autotune level full"),
            GpuTuning::autotuning(),
            "{text}"
        );
        assert_eq!(
            tuning
                .clone()
                .for_device("cuda NVIDIA H200 (SXM)")
                .compiled_dir(),
            PathBuf::from("/somewhere/kiln/compiled/cuda-nvidia-h200-sxm")
        );
        assert_eq!(tuning.with_kernel_log(false).kernel_log(), None);
    }
}
