//! Telling an out-of-memory failure from any other failure, by its message.

/// Substrings (lowercase) of the messages with which Burn, CubeCL, wgpu, the CUDA driver and
/// Rust's allocator report a failed allocation:
/// - `out of memory`: CUDA's error string, wgpu's `Error::OutOfMemory` ("Out of Memory"),
///   PyTorch-style text;
/// - `out-of-memory`: CubeCL 0.10's `LaunchError::OutOfMemory` ("An out-of-memory error
///   happened during launch");
/// - `out_of_memory`, `out_of_device_memory`, `out_of_host_memory`: the driver's codes when no
///   text came with them (cudarc's `DriverError(CUDA_ERROR_OUT_OF_MEMORY)`, Vulkan's
///   `ERROR_OUT_OF_DEVICE_MEMORY`);
/// - `outofmemory`: the `Debug` text of `OutOfMemory` variants (wgpu's);
/// - `memory allocation of`: Rust's "memory allocation of N bytes failed";
/// - `can't allocate`: CubeCL 0.10's `IoError::BufferTooBig` ("can't allocate buffer of size:
///   N", its mapping of a CUDA allocation failure), PyTorch's CPU allocator;
/// - `cannot allocate` / `failed to allocate`: allocators and drivers (`ENOMEM`'s "Cannot
///   allocate memory").
///
/// A kiln message about a memory *budget* is not among them: a trial above the budget is
/// classified where it is measured, and the budget's configuration errors must stop the search.
const PATTERNS: [&str; 10] = [
    "out of memory",
    "out-of-memory",
    "out_of_memory",
    "out_of_device_memory",
    "out_of_host_memory",
    "outofmemory",
    "memory allocation of",
    "can't allocate",
    "cannot allocate",
    "failed to allocate",
];

/// Whether `message` reports running out of memory.
pub fn is_out_of_memory(message: &str) -> bool {
    let message = message.to_lowercase();
    PATTERNS.iter().any(|pattern| message.contains(pattern))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_backends_messages_and_nothing_else() {
        for message in [
            "CUDA error: out of memory",
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")",
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY)",
            "An out-of-memory error happened during launch\nCaused by:\n  pool exhausted",
            "panicked: called `Result::unwrap()` on an `Err` value: can't allocate buffer of \
             size: 123",
            "wgpu error: Out of Memory",
            "OutOfMemory { source: None }",
            "Validation Error: ERROR_OUT_OF_DEVICE_MEMORY",
            "memory allocation of 1073741824 bytes failed",
            "DefaultCPUAllocator: can't allocate memory",
            "Cannot allocate memory (os error 12)",
        ] {
            assert!(is_out_of_memory(message), "{message}");
        }
        for message in [
            "shape mismatch: [2, 3] vs [3, 2]",
            "index out of bounds",
            "A compilation error happened during launch\nCaused by:\n  unsupported op",
            "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
            "a memory budget of 10 bytes is set but there is no memory probe to check it against",
            "the parent set a memory budget, but the child has no memory probe",
            "",
        ] {
            assert!(!is_out_of_memory(message), "{message}");
        }
    }
}
