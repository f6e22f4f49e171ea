//! Telling an out-of-memory failure from any other failure, by its message.

/// Substrings (lowercase) of the messages with which Burn, CubeCL, the CUDA driver and Rust's
/// allocator report a failed allocation:
/// - `out of memory`: CUDA (`CUDA_ERROR_OUT_OF_MEMORY`: "out of memory"), PyTorch-style text;
/// - `outofmemory`: CubeCL's `IoError::OutOfMemory` / `LaunchError::OutOfMemory` debug text;
/// - `buffertoobig`: CubeCL 0.10's mapping of a CUDA allocation failure;
/// - `memory allocation of`: Rust's "memory allocation of N bytes failed";
/// - `can't allocate` / `cannot allocate` / `failed to allocate`: allocators and drivers;
/// - `memory budget`: kiln's own budget check (a trial above the memory budget).
const PATTERNS: [&str; 8] = [
    "out of memory",
    "outofmemory",
    "buffertoobig",
    "memory allocation of",
    "can't allocate",
    "cannot allocate",
    "failed to allocate",
    "memory budget",
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
            "Err(IoError(OutOfMemory))",
            "BufferTooBig { size: 123 }",
            "memory allocation of 1073741824 bytes failed",
            "DefaultCPUAllocator: can't allocate memory",
            "above the memory budget: 12 > 10 bytes",
        ] {
            assert!(is_out_of_memory(message), "{message}");
        }
        for message in [
            "shape mismatch: [2, 3] vs [3, 2]",
            "index out of bounds",
            "",
        ] {
            assert!(!is_out_of_memory(message), "{message}");
        }
    }
}
