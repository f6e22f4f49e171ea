//! Integration tests of kiln-ml-profile, one test binary (each links Burn, which is slow): the
//! device monitor, its pool figures on wgpu, and the phase timer on kiln's trainer. The tests
//! that measure the process's heap (`finder.rs`, `finder_child.rs`, `monitor_heap.rs`) keep a
//! binary each: the heap is the whole process's, so a test that reads it must be alone in it
//! (threads of a test that just ended still free memory while the next one starts).

mod monitor;
mod monitor_wgpu;
mod trainer;
