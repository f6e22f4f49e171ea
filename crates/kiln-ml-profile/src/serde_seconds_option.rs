//! Optional durations in JSON as seconds or `null`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes an optional duration as seconds or `null`.
pub fn serialize<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serializer.serialize_some(&duration.as_secs_f64()),
        None => serializer.serialize_none(),
    }
}

/// Reads seconds or `null` back.
pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    Option::<f64>::deserialize(deserializer)?
        .map(|seconds| Duration::try_from_secs_f64(seconds).map_err(serde::de::Error::custom))
        .transpose()
}
