//! Durations in JSON as seconds (f64), as every `--json` figure of kiln is.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes a duration as seconds.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// Reads seconds back into a duration.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let seconds = f64::deserialize(deserializer)?;
    Duration::try_from_secs_f64(seconds).map_err(serde::de::Error::custom)
}
