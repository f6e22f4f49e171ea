//! A sample type's serde layout, as serde-reflection traces it: what the bincode fingerprint
//! adds to the type's name, so a type whose fields changed never decodes its old bytes.

use std::collections::{BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock, PoisonError};

use kiln_ml_core::Fingerprint;
use serde::de::DeserializeOwned;
use serde_reflection::{ContainerFormat, Registry, Samples, Tracer, TracerConfig};

/// The fingerprint of `T`'s layout: its format and every named container it reaches (field
/// names and types, variants), or `None` when serde cannot trace it (a `Deserialize` that
/// refuses the tracer's made-up values). Traced once per type name and process.
pub(crate) fn of<T: DeserializeOwned>() -> Option<Fingerprint> {
    static TRACED: OnceLock<Mutex<HashMap<&'static str, Option<Fingerprint>>>> = OnceLock::new();
    let name = std::any::type_name::<T>();
    let known = TRACED.get_or_init(Default::default);
    if let Some(layout) = known
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
    {
        return *layout;
    }
    // A user `Deserialize` may panic on made-up values: that type is untraced, not a crash.
    let layout = catch_unwind(AssertUnwindSafe(trace::<T>))
        .unwrap_or_else(|_| Err("its Deserialize panicked on the tracer's values".to_owned()))
        .inspect_err(|why| {
            log::warn!(
                "kiln-ml-cache: serde-reflection cannot trace the sample type {name} ({why}): \
                 its cache key counts its name alone, so bump the transform's version when \
                 its fields change"
            )
        })
        .ok();
    known
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name, layout);
    layout
}

/// The most passes over `T` one trace makes: each pass visits at least one variant not seen
/// before, so this bounds the variants of all its enums together, far above real sample types.
const MAX_PASSES: usize = 4096;

/// Traces `T` to the end: serde-reflection completes a top-level enum by itself, but an enum
/// inside `T` (a field, an `Option`, a `Vec`'s items) only one variant per pass, and flags it
/// as incomplete by a name it reveals only when asked for the registry. So: pass over `T` until
/// no enum whose name is known is incomplete; when the registry names others, trace again
/// knowing those too. An enum it cannot finish (one inside a later variant of another enum,
/// which the tracer no longer visits once the outer one is complete) makes the trace fail.
fn trace<T: DeserializeOwned>() -> Result<Fingerprint, String> {
    let samples = Samples::new();
    let mut enums: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut tracer = Tracer::new(TracerConfig::default());
        let mut format = None;
        let mut exhausted = true;
        for _ in 0..MAX_PASSES {
            format = Some(
                tracer
                    .trace_type_once::<T>(&samples)
                    .map_err(|error| error.to_string())?
                    .0,
            );
            // Clearing the flags lets the next pass visit the next variants.
            let incomplete = (enums.iter())
                .filter(|name| tracer.check_incomplete_enum(name).is_some())
                .count();
            if incomplete == 0 {
                exhausted = false;
                break;
            }
        }
        match tracer.registry() {
            Ok(registry) => {
                // serde-reflection stops visiting an enum once the one above it is complete
                // (a later variant of another enum): its variants stay at provisional indices
                // (near u32::MAX) rather than 0..n. Half a layout would vouch for what it
                // never saw.
                if let Some(name) = partly_traced_enum(&registry) {
                    return Err(format!(
                        "the enum {name} inside it could not be traced to its last variant"
                    ));
                }
                if exhausted {
                    return Err(format!("tracing took more than {MAX_PASSES} passes"));
                }
                // The Debug forms are complete (names, formats, variants in order) and
                // deterministic (the registry is a BTreeMap).
                let format = format.expect("MAX_PASSES is at least one");
                return Ok(Fingerprint::builder()
                    .str(&format!("{format:?}"))
                    .str(&format!("{registry:?}"))
                    .finish());
            }
            Err(serde_reflection::Error::MissingVariants(missing)) => {
                let before = enums.len();
                enums.extend(missing.iter().cloned());
                if enums.len() == before {
                    // Known enums are cleared after each pass: only the passes running out
                    // leaves one flagged.
                    return Err(format!("tracing took more than {MAX_PASSES} passes"));
                }
            }
            Err(error) => return Err(error.to_string()),
        }
    }
}

/// An enum of `registry` whose variants are not all traced: its indices are not `0..n`.
fn partly_traced_enum(registry: &Registry) -> Option<&str> {
    registry
        .iter()
        .find_map(|(name, container)| match container {
            ContainerFormat::Enum(variants) => {
                (!variants.keys().copied().eq(0..variants.len() as u32)).then_some(name.as_str())
            }
            _ => None,
        })
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

    /// `enum Kind` whose last variant holds a `$cyclist`.
    macro_rules! kind {
        ($cyclist:ty) => {
            #[derive(serde::Deserialize)]
            pub enum Kind {
                Car,
                Pedestrian { height: f32 },
                Cyclist($cyclist),
            }
        };
    }

    /// `struct Sample` with a `Kind` reached directly, through an `Option` and through a `Vec`,
    /// and a field `a` of type `$a`.
    macro_rules! sample {
        ($a:ty) => {
            #[derive(serde::Deserialize)]
            pub struct Sample {
                pub kind: Kind,
                pub maybe: Option<Kind>,
                pub history: Vec<Kind>,
                pub a: $a,
            }
        };
    }

    mod enums_before {
        kind!(u8);
        sample!(u32);
    }

    /// `enums_before::Sample` with `a` retyped.
    mod field_retyped {
        pub use super::enums_before::Kind;
        sample!(f32);
    }

    /// `enums_before::Kind` with its last variant's field retyped.
    mod variant_retyped {
        kind!(u16);
        sample!(u32);
    }

    mod nested_in_a_later_variant {
        #[derive(serde::Deserialize)]
        pub enum Outer {
            First,
            Second(Inner),
        }

        #[derive(serde::Deserialize)]
        pub enum Inner {
            A,
            B,
            C(u8),
        }
    }

    /// Enums inside a sample type (fields, options, sequences) are traced to their last
    /// variant, so the layout still tells a changed field or variant apart (it was the type's
    /// name alone).
    #[test]
    fn layouts_with_enums_inside_are_traced() {
        let before = of::<enums_before::Sample>().expect("traced");
        assert_ne!(of::<field_retyped::Sample>().expect("traced"), before);
        assert_ne!(of::<variant_retyped::Sample>().expect("traced"), before);
        let top = of::<enums_before::Kind>().expect("a top-level enum is traced");
        assert_ne!(of::<variant_retyped::Kind>().expect("traced"), top);
        assert_ne!(
            of::<Option<enums_before::Kind>>().expect("traced"),
            of::<Option<variant_retyped::Kind>>().expect("traced")
        );
        assert_ne!(
            of::<Vec<enums_before::Kind>>().expect("traced"),
            of::<Vec<variant_retyped::Kind>>().expect("traced")
        );
    }

    /// An enum the tracer stops visiting before its last variant is not half fingerprinted:
    /// the type is untraced (its name alone, and a warning).
    #[test]
    fn an_enum_that_cannot_be_traced_to_its_end_leaves_the_type_untraced() {
        assert_eq!(of::<nested_in_a_later_variant::Outer>(), None);
        let why = trace::<nested_in_a_later_variant::Outer>().unwrap_err();
        assert!(why.contains("the enum Inner"), "{why}");
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
