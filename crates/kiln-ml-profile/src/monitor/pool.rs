//! Burn's device memory pool on the CubeCL backends (wgpu, CUDA), read through the CubeCL
//! compute client.
//!
//! Burn 0.21's `Backend` trait has no memory-usage call; CubeCL's client has
//! `memory_usage()` (live bytes, padding, reserved bytes) and `memory_cleanup()`. Both act on
//! one **stream** of the device's server, and a client's stream is, unless set, the calling
//! thread's (`StreamId::current()`, a per-thread counter). Each stream has its own memory
//! pool, so a client used on the monitor thread would read that thread's empty pool. A
//! [`CubePoolProbe`] therefore records the stream of the thread that creates it, and must be
//! created on the training thread (the one that creates the tensors).
//!
//! Burn's fusion backend (on by default for wgpu and CUDA) keeps to that stream: it runs its
//! queued operations on the device's runner thread, but every task sent there carries the
//! sender's stream id (cubecl-common `ChannelDeviceHandle::submit*` wrap the task in
//! `StreamId::executes`), and fused and unfused operations alike allocate in the training
//! thread's pool. `tests/profile/monitor_wgpu.rs` checks this on wgpu.

use std::sync::atomic::{AtomicU64, Ordering};

use cubecl::MemoryUsage;
use cubecl::Runtime;
use cubecl::client::ComputeClient;
use cubecl::stream_id::StreamId;

use crate::{MemoryProbe, MemoryReading};

/// The two client calls the probe makes, without the runtime's type.
trait PoolClient: Send + Sync {
    fn memory_usage(&self) -> Result<MemoryUsage, String>;
    fn memory_cleanup(&self);
}

impl<R: Runtime> PoolClient for ComputeClient<R> {
    fn memory_usage(&self) -> Result<MemoryUsage, String> {
        ComputeClient::memory_usage(self).map_err(|error| {
            // The server's messages carry a backtrace; a report wants the cause.
            let text = error.to_string();
            let cause = text.split("\nBacktrace").next().unwrap_or(&text);
            cause.split_whitespace().collect::<Vec<_>>().join(" ")
        })
    }

    fn memory_cleanup(&self) {
        ComputeClient::memory_cleanup(self);
    }
}

/// A [`MemoryProbe`] of Burn's memory pool on a CubeCL backend (wgpu, CUDA): bytes held by live
/// tensors, bytes reserved from the device, and the highest reserved figure read since
/// [`reset_peak`](MemoryProbe::reset_peak).
///
/// **Create it on the training thread.** CubeCL keeps one memory pool per stream, and a
/// stream is, by default, the calling thread's; the probe pins the stream of the thread that
/// creates it, so that the monitor thread reads the training thread's pool, not its own empty
/// one. Reading it from any thread afterwards is fine. Burn's fusion backend runs queued
/// operations on the device's runner thread but under the stream of the thread that queued
/// them, so fused kernels' outputs are counted. Tensors created on other threads (a loader
/// collating batches on the device in its workers) live in those threads' pools and are not.
///
/// CubeCL keeps no high-water mark, so the peak is the highest of this probe's reads: as fine
/// as the reads are frequent (the monitor's interval, or each batch-size trial's end). A
/// monitor and a batch-size finder should each have their own probe: see
/// [`reset_peak`](Self::reset_peak).
pub struct CubePoolProbe {
    name: String,
    stream: StreamId,
    client: Box<dyn PoolClient>,
    peak_reserved: AtomicU64,
    peak_in_use: AtomicU64,
}

impl CubePoolProbe {
    /// A probe of the pool of `device` on runtime `R`, for the calling thread's stream,
    /// named `name` in reports (`wgpu pool`, `cuda pool`).
    pub fn new<R: Runtime>(device: &R::Device, name: impl Into<String>) -> Self {
        let stream = StreamId::current();
        let mut client = R::client(device);
        // SAFETY: `set_stream` is unsafe because work submitted on a stream from another
        // thread would race with the owner's ordering of that stream. This client only ever
        // calls `memory_usage` and `memory_cleanup`, and submits no kernel, read or write.
        // Both run on the device's server thread, serialized with the training thread's own
        // tasks; before reading, the server flushes the stream's queued tasks to the device
        // (cubecl-wgpu 0.10 `memory_usage`: `scheduler.execute_streams(vec![stream_id])`),
        // which only starts earlier the work the stream would run anyway. `memory_cleanup`
        // frees pages no live allocation uses, as Burn's `memory_cleanup` does from the
        // training thread.
        unsafe { client.set_stream(stream) };
        Self {
            name: name.into(),
            stream,
            client: Box::new(client),
            peak_reserved: AtomicU64::new(0),
            peak_in_use: AtomicU64::new(0),
        }
    }

    /// A probe of Burn's wgpu pool on `device` (named `wgpu pool`), for the calling thread.
    #[cfg(feature = "wgpu")]
    pub fn wgpu(device: &burn::backend::wgpu::WgpuDevice) -> Self {
        Self::new::<burn::backend::wgpu::WgpuRuntime>(device, "wgpu pool")
    }

    /// A probe of Burn's CUDA pool on `device` (named `cuda pool`), for the calling thread.
    #[cfg(feature = "cuda")]
    pub fn cuda(device: &burn::backend::cuda::CudaDevice) -> Self {
        Self::new::<cubecl::cuda::CudaRuntime>(device, "cuda pool")
    }

    /// The CubeCL stream whose pool it reads (the creating thread's).
    pub fn stream_id(&self) -> u64 {
        self.stream.value
    }

    /// The highest in-use figure read since the last reset.
    pub fn peak_in_use_bytes(&self) -> u64 {
        self.peak_in_use.load(Ordering::Relaxed)
    }
}

impl MemoryProbe for CubePoolProbe {
    fn name(&self) -> &str {
        &self.name
    }

    fn read(&self) -> Result<MemoryReading, String> {
        let usage = self.client.memory_usage()?;
        let peak = self
            .peak_reserved
            .fetch_max(usage.bytes_reserved, Ordering::Relaxed)
            .max(usage.bytes_reserved);
        self.peak_in_use
            .fetch_max(usage.bytes_in_use, Ordering::Relaxed);
        Ok(MemoryReading {
            in_use_bytes: usage.bytes_in_use,
            reserved_bytes: usage.bytes_reserved,
            // CubeCL's pool does not know the device's size; NVML does.
            total_bytes: None,
            peak_bytes: Some(peak),
        })
    }

    /// Starts a new peak window at zero; the next read sets it.
    ///
    /// A read is two steps, the pool's figures and then the max into the peak, with no lock
    /// around them. A [`DeviceMonitor`](super::DeviceMonitor) reading this same probe on its
    /// thread at the moment of the reset can therefore write the figure it read just before
    /// the reset into the new window, and a batch-size trial would inherit the previous
    /// trial's peak. Give the [`BatchSizeFinder`](crate::BatchSizeFinder) its own probe (a
    /// second `CubePoolProbe` of the same device, created on the training thread), not the
    /// monitor's.
    fn reset_peak(&self) {
        self.peak_reserved.store(0, Ordering::Relaxed);
        self.peak_in_use.store(0, Ordering::Relaxed);
    }

    fn cleanup(&self) {
        self.client.memory_cleanup();
    }
}

impl std::fmt::Debug for CubePoolProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubePoolProbe")
            .field("name", &self.name)
            .field("stream", &self.stream.value)
            .field("peak_reserved", &self.peak_reserved.load(Ordering::Relaxed))
            .finish()
    }
}
