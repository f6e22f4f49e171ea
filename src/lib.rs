//! kiln keeps accelerators fed.
//!
//! This facade re-exports kiln's crates behind features of the same role name so one dependency
//! gives the whole toolkit. The crate features and `codecs` are on by default; `cuda`, `wgpu`,
//! `autotune` and the object stores (`s3`, `gcs`, `azure`, `http`) are opt-in:
//!
//! | feature | module | crate |
//! |---|---|---|
//! | `core` | [`core`] | `kiln-ml-core`: the shared traits |
//! | `backend` | [`backend`] | `kiln-ml-device`: Burn device selection (CUDA, a Vulkan GPU, or flex on the CPU) |
//! | `sampler` | [`sampler`] | `kiln-ml-sampler`: block shuffle, sharding, resume |
//! | `cache` | [`cache`] | `kiln-ml-cache`: fingerprinted preprocessing caches (disk + RAM) |
//! | `data` | [`data`] | `kiln-ml-data`: Parquet source, loader (implies `cache`) |
//! | `codecs` | — | the Parquet codecs `snappy`, `zstd`, `lz4`, `gzip`, `brotli` (each a feature) |
//! | `train` | [`train`] | `kiln-ml-train`: the training loop |
//! | `metrics` | [`metrics`] | `kiln-ml-metrics`: trajectory metrics |
//! | `profile` | [`profile`] | `kiln-ml-profile`: phase timing, device monitor, batch-size finder, verdicts, MFU |
//! | `cuda` | — | Burn's CUDA backend with fusion |
//! | `wgpu` | — | Burn's wgpu backend on Vulkan with fusion (GPUs, or lavapipe on the CPU) |
//! | `autotune` | — | Burn's autotuning of its GPU kernels, off by default (see [`backend`]) |
//! | `s3`, `gcs`, `azure`, `http` | — | `s3://`, `gs://`, `az://` and `http(s)://` URLs in the Parquet source |
//!
//! ```
//! use kiln_ml::core::{BlockLayout, Fingerprint, Layout};
//!
//! let mut builder = Layout::builder();
//! builder.add_file(Fingerprint::of_bytes(b"events-000.parquet"), &[1024, 1024, 512]);
//! let layout = builder.build().unwrap();
//! assert_eq!(layout.num_samples(), 2560);
//! ```

#[cfg(feature = "cache")]
pub use kiln_ml_cache as cache;
#[cfg(feature = "core")]
pub use kiln_ml_core as core;
#[cfg(feature = "data")]
pub use kiln_ml_data as data;
#[cfg(feature = "backend")]
pub use kiln_ml_device as backend;
#[cfg(feature = "metrics")]
pub use kiln_ml_metrics as metrics;
#[cfg(feature = "profile")]
pub use kiln_ml_profile as profile;
#[cfg(feature = "sampler")]
pub use kiln_ml_sampler as sampler;
#[cfg(feature = "train")]
pub use kiln_ml_train as train;
