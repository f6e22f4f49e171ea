//! Whether CUDA can be used: a short conversation with the driver API (`cuInit`,
//! `cuDeviceGetCount`, `cuDeviceGetName`), without touching Burn's CUDA runtime.

/// Whether CUDA can be used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaStatus {
    /// The driver loaded and reported devices.
    Available {
        /// Number of CUDA devices.
        devices: usize,
        /// The first device's name, as the driver reports it (`NVIDIA H200`).
        name: String,
    },
    /// CUDA cannot be used.
    Unavailable {
        /// Why, in words.
        reason: String,
    },
}

/// Checks for a usable CUDA driver and devices without touching Burn's CUDA runtime (which
/// loads the driver lazily and panics on a device thread when there is none).
pub fn cuda_status() -> CudaStatus {
    #[cfg(feature = "cuda")]
    {
        driver::probe()
    }
    #[cfg(not(feature = "cuda"))]
    {
        CudaStatus::Unavailable {
            reason: "kiln was built without the `cuda` feature".to_owned(),
        }
    }
}

#[cfg(feature = "cuda")]
mod driver {
    use super::CudaStatus;
    use crate::cuda_errors::describe_error;

    #[cfg(windows)]
    const LIBRARY: &str = "nvcuda.dll";
    #[cfg(not(windows))]
    const LIBRARY: &str = "libcuda.so.1";

    type CuInit = unsafe extern "C" fn(flags: u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(count: *mut i32) -> i32;
    type CuDeviceGetName = unsafe extern "C" fn(name: *mut u8, length: i32, device: i32) -> i32;
    type CuGetErrorName =
        unsafe extern "C" fn(error: i32, name: *mut *const std::ffi::c_char) -> i32;

    /// A driver error as `CUDA error 100 (CUDA_ERROR_NO_DEVICE: hint)`: its name from the
    /// driver when it has one, and what to check for the usual causes.
    fn describe(library: &libloading::Library, code: i32) -> String {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the symbol type matches the driver API's C signature; on success the driver
        // points `name` at a static NUL-terminated string.
        let named = unsafe {
            library
                .get::<CuGetErrorName>(b"cuGetErrorName\0")
                .is_ok_and(|get_name| get_name(code, &mut name) == 0 && !name.is_null())
        };
        let name = named.then(|| {
            // SAFETY: checked non-null above; the driver's error names are static C strings.
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        });
        describe_error(code, name.as_deref())
    }

    pub(super) fn probe() -> CudaStatus {
        let unavailable = |reason: String| CudaStatus::Unavailable { reason };
        // SAFETY: loading the CUDA driver runs its initializers, which is what Burn would do on
        // first use anyway; the library stays loaded for the life of the process.
        let library = match unsafe { libloading::Library::new(LIBRARY) } {
            Ok(library) => library,
            Err(error) => {
                return unavailable(format!("no CUDA driver ({LIBRARY} not loadable: {error})"));
            }
        };
        // SAFETY: the symbol types match the CUDA driver API's documented C signatures.
        let (init, count) = unsafe {
            match (
                library.get::<CuInit>(b"cuInit\0"),
                library.get::<CuDeviceGetCount>(b"cuDeviceGetCount\0"),
            ) {
                (Ok(init), Ok(count)) => (init, count),
                _ => return unavailable(format!("{LIBRARY} lacks cuInit or cuDeviceGetCount")),
            }
        };
        // SAFETY: cuInit takes flags (must be 0) and is safe to call repeatedly.
        let status = unsafe { init(0) };
        if status != 0 {
            return unavailable(format!("cuInit failed: {}", describe(&library, status)));
        }
        let mut devices = 0i32;
        // SAFETY: the pointer is to a live, writable i32.
        let status = unsafe { count(&mut devices) };
        if status != 0 {
            return unavailable(format!(
                "cuDeviceGetCount failed: {}",
                describe(&library, status)
            ));
        }
        if devices <= 0 {
            return unavailable("the CUDA driver reports no devices".to_owned());
        }
        let mut name = [0u8; 256];
        // SAFETY: the symbol type matches the driver API's C signature; the buffer is live and
        // its length is passed, so the driver writes at most that many bytes, NUL included.
        let named = unsafe {
            library
                .get::<CuDeviceGetName>(b"cuDeviceGetName\0")
                .map(|get_name| get_name(name.as_mut_ptr(), name.len() as i32, 0) == 0)
                .unwrap_or(false)
        };
        let name = if named {
            let end = name
                .iter()
                .position(|&byte| byte == 0)
                .unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        } else {
            "CUDA device 0".to_owned()
        };
        // Keep the driver loaded: Burn's runtime will use the same library.
        std::mem::forget(library);
        CudaStatus::Available {
            devices: devices as usize,
            name,
        }
    }
}
