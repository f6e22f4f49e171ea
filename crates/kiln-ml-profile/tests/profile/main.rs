//! Integration tests of kiln-ml-profile, one test binary (each links Burn, which is slow): the
//! device monitor, its pool figures on wgpu, and the phase timer on kiln's trainer. The tests
//! that measure the process's heap have their own binary (`tests/heap`).

mod monitor;
mod monitor_wgpu;
mod trainer;
