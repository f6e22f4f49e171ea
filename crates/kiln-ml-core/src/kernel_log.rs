//! Where the GPU runtime logs the kernels it compiles: named by the device setup
//! (`kiln_ml_device::GpuTuning`), read by the trainer's slow-first-step notice, two crates that
//! do not know each other.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The file the GPU runtime logs kernel compilation and tuning to, once named.
static KERNEL_LOG: OnceLock<PathBuf> = OnceLock::new();

/// Names the file where the GPU runtime (CubeCL) logs each kernel it compiles and each
/// autotuning run, for the rest of the process; the first name given stays.
pub fn set_kernel_log(path: PathBuf) {
    let _ = KERNEL_LOG.set(path);
}

/// The kernel log named by [`set_kernel_log`], if any.
pub fn kernel_log() -> Option<&'static Path> {
    KERNEL_LOG.get().map(PathBuf::as_path)
}
