//! Stable 128-bit content fingerprints.
//!
//! A [`Fingerprint`] identifies the exact content of a dataset layout or the exact behaviour of a
//! transform, so that caches keyed by it never serve stale data. It is computed with XXH3-128,
//! whose output is specified and identical on every platform and release, and fed through a
//! [`FingerprintBuilder`] that prefixes every variable-length field with its length so that
//! `("ab", "c")` and `("a", "bc")` never collide by construction.

use std::fmt;
use std::str::FromStr;

use xxhash_rust::xxh3::Xxh3;

/// A stable 128-bit fingerprint, shown as 32 lowercase hex digits.
///
/// ```
/// use kiln_ml_core::Fingerprint;
///
/// let a = Fingerprint::builder().str("normalize").u64(2).finish();
/// let b = Fingerprint::builder().str("normalize").u64(3).finish();
/// assert_ne!(a, b);
/// assert_eq!(a.to_string().parse::<Fingerprint>().unwrap(), a);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(u128);

impl Fingerprint {
    /// Wraps a raw 128-bit value.
    pub const fn from_u128(value: u128) -> Self {
        Self(value)
    }

    /// The raw 128-bit value.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// Little-endian bytes of the fingerprint, as written into file headers.
    pub const fn to_le_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// Reads a fingerprint back from [`Fingerprint::to_le_bytes`].
    pub const fn from_le_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_le_bytes(bytes))
    }

    /// The fingerprint of a byte string.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self::builder().bytes(bytes).finish()
    }

    /// Starts a fingerprint built from several fields.
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder::default()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The error of parsing a [`Fingerprint`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint {text:?}: expected 32 hex digits")]
pub struct ParseFingerprintError {
    text: String,
}

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ParseFingerprintError {
            text: text.to_owned(),
        };
        // Exactly the form `Display` writes: `from_str_radix` alone would also take a sign and
        // upper-case digits, so two names could read as one fingerprint.
        if text.len() != 32
            || !text
                .bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(error());
        }
        u128::from_str_radix(text, 16)
            .map(Self)
            .map_err(|_| error())
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Feeds typed fields into a [`Fingerprint`].
///
/// Each field is tagged with its kind and, for variable-length fields, its length, so
/// different field sequences give different inputs to the hash.
#[derive(Clone, Default)]
pub struct FingerprintBuilder {
    hasher: Xxh3,
}

impl fmt::Debug for FingerprintBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FingerprintBuilder").finish_non_exhaustive()
    }
}

impl FingerprintBuilder {
    fn tagged(mut self, tag: u8, payload: &[u8]) -> Self {
        self.hasher.update(&[tag]);
        self.hasher.update(&(payload.len() as u64).to_le_bytes());
        self.hasher.update(payload);
        self
    }

    /// Adds a byte string.
    pub fn bytes(self, bytes: &[u8]) -> Self {
        self.tagged(b'b', bytes)
    }

    /// Adds a UTF-8 string.
    pub fn str(self, text: &str) -> Self {
        self.tagged(b's', text.as_bytes())
    }

    /// Adds an unsigned integer.
    pub fn u64(self, value: u64) -> Self {
        self.tagged(b'u', &value.to_le_bytes())
    }

    /// Adds a signed integer.
    pub fn i64(self, value: i64) -> Self {
        self.tagged(b'i', &value.to_le_bytes())
    }

    /// Adds a float by its exact bit pattern (so `0.0` and `-0.0` differ, as they may for a
    /// transform).
    pub fn f64(self, value: f64) -> Self {
        self.tagged(b'f', &value.to_bits().to_le_bytes())
    }

    /// Adds another fingerprint, for example a file's identity inside a layout's.
    pub fn fingerprint(self, value: Fingerprint) -> Self {
        self.tagged(b'p', &value.to_le_bytes())
    }

    /// Adds a fingerprint that may be absent: `1` and it, or `0` (so that absent and present
    /// never collide).
    pub fn optional_fingerprint(self, value: Option<Fingerprint>) -> Self {
        match value {
            Some(value) => self.u64(1).fingerprint(value),
            None => self.u64(0),
        }
    }

    /// Finishes the fingerprint.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.hasher.digest128())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_boundaries_matter() {
        let ab_c = Fingerprint::builder().str("ab").str("c").finish();
        let a_bc = Fingerprint::builder().str("a").str("bc").finish();
        assert_ne!(ab_c, a_bc);
    }

    #[test]
    fn field_kinds_matter() {
        let as_u64 = Fingerprint::builder().u64(7).finish();
        let as_i64 = Fingerprint::builder().i64(7).finish();
        assert_ne!(as_u64, as_i64);
    }

    #[test]
    fn is_stable_across_releases() {
        // A pinned value: if this changes, every on-disk cache key changes with it, which must be
        // a deliberate format-version bump and not an accident.
        let value = Fingerprint::builder().str("kiln").u64(1).finish();
        assert_eq!(value.to_string(), PINNED);
    }
    const PINNED: &str = "0d90e92513505c9d77991aea55ed89e0";

    #[test]
    fn text_and_serde_round_trip() {
        let value = Fingerprint::of_bytes(b"data");
        let text = value.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<Fingerprint>().unwrap(), value);
        let json = serde_json::to_string(&value).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<Fingerprint>(&json).unwrap(), value);
        assert!("xyz".parse::<Fingerprint>().is_err());
        assert!("g".repeat(32).parse::<Fingerprint>().is_err());
        // Only the form `Display` writes: no sign, no upper case.
        assert!(format!("+{}", &PINNED[1..]).parse::<Fingerprint>().is_err());
        assert!(PINNED.to_uppercase().parse::<Fingerprint>().is_err());
        assert!(PINNED.parse::<Fingerprint>().is_ok());
    }

    #[test]
    fn bytes_round_trip() {
        let value = Fingerprint::of_bytes(b"x");
        assert_eq!(Fingerprint::from_le_bytes(value.to_le_bytes()), value);
    }
}
