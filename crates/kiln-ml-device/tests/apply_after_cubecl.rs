//! `GpuTuning::apply` after CubeCL read its settings (as making a GPU device does) is refused
//! and changes nothing: no folder of the refused settings is created. Its own test binary:
//! CubeCL's settings are process-wide.
#![cfg(any(feature = "cuda", feature = "wgpu"))]

use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use kiln_ml_device::{GpuTuning, GpuTuningError};

#[test]
fn a_refused_apply_creates_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let logs = dir.path().join("logs");
    // What the first GPU device or tensor does: CubeCL reads (and keeps) its settings.
    let _read = CubeClRuntimeConfig::get();
    let refused = GpuTuning::from_env()
        .unwrap()
        .with_cache_dir(&cache)
        .with_kernel_log(true)
        .with_launch_log(logs.join("launches.log"))
        .apply();
    match refused {
        Err(GpuTuningError::AlreadyConfigured { by }) => {
            assert!(by.contains("CubeCL"), "{by}")
        }
        other => panic!("expected AlreadyConfigured, got {other:?}"),
    }
    assert!(!cache.exists(), "the refused cache folder was created");
    assert!(
        !logs.exists(),
        "the refused launch log's folder was created"
    );
    assert!(GpuTuning::applied().is_none());
}
