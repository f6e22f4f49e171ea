//! How cached samples become bytes: bincode (serde) by default, raw bytes for numeric arrays.

use std::fmt;

use bytemuck::Pod;
use kiln_ml_core::Fingerprint;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes samples into cache records and decodes them back.
///
/// The [`fingerprint`](Codec::fingerprint) is part of every cache key: change it whenever the
/// byte format could change, so old segments are never misread.
pub trait Codec<T>: Send + Sync {
    /// Identifies the byte format (codec, version, sample type, byte order). A
    /// [`Cached`](crate::Cached) takes it once, at its first key, and keeps it: it must not
    /// change over the codec's life.
    fn fingerprint(&self) -> Fingerprint;

    /// Appends the encoding of `item` to `out`.
    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), CodecError>;

    /// Decodes one record; `bytes` is exactly what [`encode`](Codec::encode) appended.
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;
}

/// Why a sample could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(String);

impl CodecError {
    /// An error with a reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

/// The default codec: any serde type, through bincode 2 with fixed-width little-endian integers.
///
/// bincode writes numbers as their raw little-endian bytes with no field names or tags, so a
/// `Vec<f32>` costs a length and a copy, and decoding is a bounds-checked walk with no parsing
/// of text. Fixed-width integers (rather than varints) keep decoding branch-free; samples are
/// mostly numbers, where varints would save little space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BincodeCodec;

const BINCODE: bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
> = bincode::config::standard().with_fixed_int_encoding();

impl<T: Serialize + DeserializeOwned> Codec<T> for BincodeCodec {
    /// The codec, the sample type's name and its serde layout (every field's name and type,
    /// nested types included, traced once per type and process): a type whose fields change
    /// under the same name misses instead of decoding bytes of its old layout. A type serde
    /// cannot trace (a custom `Deserialize` that refuses made-up values, `untagged` or
    /// `flatten` attributes, an enum inside a later variant of another enum) counts by its name
    /// alone, with a warning in the log.
    fn fingerprint(&self) -> Fingerprint {
        // "kiln-data" (both codecs) predates kiln-cache (now kiln-ml-cache).
        let builder = Fingerprint::builder()
            .str("kiln-data codec")
            .str("bincode-2-fixint-le")
            .str(std::any::type_name::<T>());
        match crate::serde_layout::of::<T>() {
            Some(layout) => builder.str("serde layout").fingerprint(layout),
            None => builder.str("untraced"),
        }
        .finish()
    }

    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        bincode::serde::encode_into_std_write(item, out, BINCODE)
            .map(|_| ())
            .map_err(|error| CodecError::new(error.to_string()))
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        let (item, used) = bincode::serde::decode_from_slice(bytes, BINCODE)
            .map_err(|error| CodecError::new(error.to_string()))?;
        if used != bytes.len() {
            return Err(CodecError::new(format!(
                "{} trailing bytes after the sample",
                bytes.len() - used
            )));
        }
        Ok(item)
    }
}

/// Zero-copy codec for plain numeric arrays (`Vec<f32>`, `Vec<[f32; 3]>`, any `bytemuck::Pod`):
/// the record is the array's memory, written and read without per-element work.
///
/// Records are 8-byte aligned inside segments, whether read or memory-mapped, so
/// [`Segment::pod_record`](crate::Segment::pod_record) can view them in place; decoding to a
/// `Vec` is one `memcpy`. Byte order is the machine's, which is part of the fingerprint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCodec;

impl<P: Pod + Send + Sync> Codec<Vec<P>> for PodCodec {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::builder()
            .str("kiln-data codec")
            .str("pod")
            .str(std::any::type_name::<P>())
            .u64(size_of::<P>() as u64)
            .str(if cfg!(target_endian = "little") {
                "le"
            } else {
                "be"
            })
            .finish()
    }

    fn encode(&self, item: &Vec<P>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(bytemuck::cast_slice(item));
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<P>, CodecError> {
        if size_of::<P>() == 0 || !bytes.len().is_multiple_of(size_of::<P>()) {
            return Err(CodecError::new(format!(
                "{} bytes are not a whole number of {}-byte elements",
                bytes.len(),
                size_of::<P>()
            )));
        }
        Ok(match bytemuck::try_cast_slice::<u8, P>(bytes) {
            Ok(values) => values.to_vec(),
            // Unaligned (a heap copy of a segment): collect element by element.
            Err(_) => bytemuck::pod_collect_to_vec(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        id: u64,
        features: Vec<f32>,
        label: Option<String>,
    }

    #[test]
    fn bincode_round_trips_serde_types() {
        let sample = Sample {
            id: 9,
            features: vec![1.5, -2.0],
            label: Some("car".to_owned()),
        };
        let mut bytes = Vec::new();
        BincodeCodec.encode(&sample, &mut bytes).unwrap();
        assert_eq!(BincodeCodec.decode(&bytes), Ok(sample));
        bytes.push(0);
        let error = Codec::<Sample>::decode(&BincodeCodec, &bytes).unwrap_err();
        assert!(error.to_string().contains("1 trailing bytes"), "{error}");
    }

    #[test]
    fn fingerprints_follow_the_sample_type() {
        assert_ne!(
            Codec::<Vec<f32>>::fingerprint(&BincodeCodec),
            Codec::<Vec<f64>>::fingerprint(&BincodeCodec)
        );
        assert_ne!(
            Codec::<Vec<f32>>::fingerprint(&PodCodec),
            Codec::<Vec<f32>>::fingerprint(&BincodeCodec)
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn the_pod_fingerprint_is_pinned() {
        // Caches written before kiln-ml-cache split out of kiln-ml-data stay valid: the domain string
        // stays "kiln-data codec".
        assert_eq!(
            Codec::<Vec<f32>>::fingerprint(&PodCodec).to_string(),
            "94dc8bc6f2a2ed22d14cab997be16a0d"
        );
    }

    #[test]
    fn pod_is_the_raw_memory() {
        let values = vec![1.0f32, 2.0, 3.0];
        let mut bytes = Vec::new();
        PodCodec.encode(&values, &mut bytes).unwrap();
        assert_eq!(bytes.len(), 12);
        assert_eq!(PodCodec.decode(&bytes), Ok(values.clone()));
        // Misaligned input still decodes.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        assert_eq!(PodCodec.decode(&shifted[1..]), Ok(values));
        assert!(Codec::<Vec<f32>>::decode(&PodCodec, &bytes[..5]).is_err());
    }
}
