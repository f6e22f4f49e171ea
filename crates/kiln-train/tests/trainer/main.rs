//! Integration tests of the trainer, one test binary (Burn binaries are slow to link).
//! Each body is backend-generic and runs on flex, and on CUDA with the `cuda` feature.

mod common;

mod accumulation;
mod amp;
mod clipping;
mod debug;
mod errors;
mod observers;
mod resume;
mod scheduler;
mod validation;
