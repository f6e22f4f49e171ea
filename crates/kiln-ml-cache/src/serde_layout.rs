//! A sample type's serde layout, as serde-reflection traces it: what the bincode fingerprint
//! adds to the type's name, so a type whose fields changed never decodes its old bytes.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};

use kiln_ml_core::Fingerprint;
use serde::de::DeserializeOwned;
use serde_reflection::{Tracer, TracerConfig};

/// The fingerprint of `T`'s layout: its format and every named container it reaches (field
/// names and types, variants), or `None` when serde cannot trace it (a `Deserialize` that
/// refuses the tracer's made-up values). Traced once per type name and process.
pub(crate) fn of<T: DeserializeOwned>() -> Option<Fingerprint> {
    static TRACED: OnceLock<Mutex<HashMap<&'static str, Option<Fingerprint>>>> = OnceLock::new();
    let name = std::any::type_name::<T>();
    let traced = TRACED.get_or_init(Default::default);
    if let Some(known) = traced
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
    {
        return *known;
    }
    // A user `Deserialize` may panic on made-up values: that type is untraced, not a crash.
    let layout = catch_unwind(AssertUnwindSafe(trace::<T>)).ok().flatten();
    traced
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name, layout);
    layout
}

fn trace<T: DeserializeOwned>() -> Option<Fingerprint> {
    let mut tracer = Tracer::new(TracerConfig::default());
    let (format, _) = tracer.trace_simple_type::<T>().ok()?;
    let registry = tracer.registry().ok()?;
    // The Debug forms are complete (names, formats, variants in order) and deterministic
    // (the registry is a BTreeMap).
    Some(
        Fingerprint::builder()
            .str(&format!("{format:?}"))
            .str(&format!("{registry:?}"))
            .finish(),
    )
}

#[cfg(test)]
mod tests {
    // The sample types are only ever deserialized by the tracer: their layouts are compared.
    #![allow(dead_code)]

    use super::*;
    use serde::{Deserialize, Deserializer};

    mod before {
        #[derive(serde::Deserialize)]
        pub struct Sample {
            pub id: u64,
            pub features: Vec<f32>,
        }
    }

    mod after {
        /// `before::Sample` with its fields swapped: the same name in a type path, another
        /// layout.
        #[derive(serde::Deserialize)]
        pub struct Sample {
            pub features: Vec<f32>,
            pub id: u64,
        }
    }

    #[derive(Deserialize)]
    struct Renamed {
        id: u64,
        features: Vec<f64>,
    }

    /// Refuses every value: serde-reflection cannot trace it.
    struct Refusing;

    impl<'de> Deserialize<'de> for Refusing {
        fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
            Err(serde::de::Error::custom("never"))
        }
    }

    #[test]
    fn layouts_tell_fields_and_their_order_apart() {
        let before = of::<before::Sample>().expect("traced");
        assert_eq!(of::<before::Sample>(), Some(before), "deterministic");
        assert_ne!(of::<after::Sample>(), Some(before));
        let renamed = of::<Renamed>().expect("traced");
        assert_ne!(renamed, before);
        assert_ne!(of::<Vec<f32>>(), of::<Vec<f64>>());
        assert_eq!(of::<Refusing>(), None);
    }
}
