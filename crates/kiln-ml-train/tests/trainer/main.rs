//! Integration tests of the trainer, one test binary (Burn binaries are slow to link).
//! Each body is backend-generic and runs on flex; on wgpu (a Vulkan adapter) with the `wgpu`
//! feature; and on CUDA with the `cuda` feature and `--ignored`.

mod common;

mod accumulation;
mod amp;
mod callbacks;
mod clipping;
mod data_parallel;
mod debug;
mod ema;
mod errors;
mod fixed_order_sum;
mod fused_optimizers;
mod loggers;
mod lr_finder;
mod norms;
mod observers;
mod products;
mod readbacks;
mod resume;
mod scheduler;
mod validation;
