//! The text of a caught panic, for errors that report a worker's or a step's panic.

use std::any::Any;

/// The message of a panic payload caught with `catch_unwind` or a thread's `join`: the text
/// of `panic!("...")` (a `&str` or a `String`), or a note that it carried something else.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("block {} is bad", 3)).unwrap_err();
/// assert_eq!(kiln_ml_core::panic_message(payload.as_ref()), "block 3 is bad");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-text payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_owned_and_other_payloads() {
        assert_eq!(panic_message(&"static"), "static");
        assert_eq!(panic_message(&String::from("owned")), "owned");
        assert_eq!(panic_message(&42u32), "a panic with a non-text payload");
    }
}
