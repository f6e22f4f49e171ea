//! The CUDA driver's errors in words: what stops a machine from using its GPU, and what to
//! check.

/// `CUDA error CODE (NAME: hint)`, with a hint for the errors that stop a machine from using
/// its GPU at all.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn describe_error(code: i32, name: Option<&str>) -> String {
    let hint = match code {
        100 => Some(
            "no CUDA device is visible: check CUDA_VISIBLE_DEVICES (an empty value hides every \
             GPU) and that nvidia-smi lists one",
        ),
        34 => Some(
            "the CUDA toolkit's stub libcuda was loaded instead of the driver's: put the \
             driver's libcuda.so.1 first on the library path",
        ),
        803 => Some(
            "the driver library and the loaded kernel module differ in version (after a driver \
             update): reload the nvidia module or reboot",
        ),
        804 => Some("this GPU does not support the forward-compatible driver in use"),
        46 => Some("the GPU is busy or unavailable (exclusive-process mode, or in use)"),
        _ => None,
    };
    let name = name.unwrap_or("unnamed");
    match hint {
        Some(hint) => format!("CUDA error {code} ({name}: {hint})"),
        None => format!("CUDA error {code} ({name})"),
    }
}

#[cfg(test)]
mod tests {
    use super::describe_error;

    #[test]
    fn driver_errors_are_named_with_what_to_check() {
        let message = describe_error(100, Some("CUDA_ERROR_NO_DEVICE"));
        assert!(
            message.starts_with("CUDA error 100 (CUDA_ERROR_NO_DEVICE: "),
            "{message}"
        );
        assert!(message.contains("CUDA_VISIBLE_DEVICES"), "{message}");
        assert_eq!(describe_error(2, None), "CUDA error 2 (unnamed)");
    }
}
