//! TensorBoard's event files: TFRecord framing around `tensorflow.Event` protocol buffers,
//! written (and read back) by hand for the three fields a scalar needs.
//!
//! A record is its length (`u64` LE), the masked CRC-32C of those 8 bytes, the data, and the
//! masked CRC-32C of the data. The data is an `Event` { wall_time = 1 (double), step = 2
//! (int64), file_version = 3 (string), summary = 5 (Summary { value = 1 (repeated Value {
//! tag = 1 (string), simple_value = 2 (float) }) }) }.

use std::path::Path;

use crc_fast::{CrcAlgorithm, checksum};

use crate::{Error, Result};

/// The first record of every event file.
pub(crate) const FILE_VERSION: &str = "brain.Event:2";

fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32;
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Frames `data` as one TFRecord.
pub(crate) fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn length_delimited(field: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push((field << 3) | 2);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn event_header(wall_time: f64, step: u64, out: &mut Vec<u8>) {
    out.push((1 << 3) | 1);
    out.extend_from_slice(&wall_time.to_le_bytes());
    out.push(2 << 3);
    varint(step, out);
}

/// The `Event` that opens a file: its format version.
pub(crate) fn file_version_event(wall_time: f64) -> Vec<u8> {
    let mut out = Vec::new();
    event_header(wall_time, 0, &mut out);
    length_delimited(3, FILE_VERSION.as_bytes(), &mut out);
    out
}

/// An `Event` holding scalars at one step.
pub(crate) fn scalars_event<'a>(
    wall_time: f64,
    step: u64,
    scalars: impl IntoIterator<Item = (&'a str, f64)>,
) -> Vec<u8> {
    let mut summary = Vec::new();
    for (tag, value) in scalars {
        let mut entry = Vec::new();
        length_delimited(1, tag.as_bytes(), &mut entry);
        entry.push((2 << 3) | 5);
        entry.extend_from_slice(&(value as f32).to_le_bytes());
        length_delimited(1, &entry, &mut summary);
    }
    let mut out = Vec::new();
    event_header(wall_time, step, &mut out);
    length_delimited(5, &summary, &mut out);
    out
}

/// A scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The step it was logged at.
    pub step: u64,
    /// The tag (`train/loss`).
    pub tag: String,
    /// The value (TensorBoard keeps f32).
    pub value: f32,
}

/// Reads the scalars of a TensorBoard event file, checking every record's checksums. Fails
/// naming the file and the byte offset of the first bad record.
pub fn read_scalars(path: &Path) -> Result<Vec<Scalar>> {
    let bytes = std::fs::read(path).map_err(|source| Error::LogIo {
        path: path.to_path_buf(),
        action: "read",
        source,
    })?;
    let bad = |offset: usize, reason: &str| Error::LogIo {
        path: path.to_path_buf(),
        action: "parse",
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("record at byte {offset}: {reason}"),
        ),
    };
    let mut scalars = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let header = bytes
            .get(offset..offset + 12)
            .ok_or_else(|| bad(offset, "truncated header"))?;
        let length = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
        if masked_crc(&header[..8]).to_le_bytes() != header[8..12] {
            return Err(bad(offset, "length checksum mismatch"));
        }
        let data = bytes
            .get(offset + 12..offset + 12 + length)
            .ok_or_else(|| bad(offset, "truncated data"))?;
        let crc = bytes
            .get(offset + 12 + length..offset + 16 + length)
            .ok_or_else(|| bad(offset, "truncated data checksum"))?;
        if masked_crc(data).to_le_bytes() != crc {
            return Err(bad(offset, "data checksum mismatch"));
        }
        decode_event(data, &mut scalars).ok_or_else(|| bad(offset, "not an Event"))?;
        offset += 16 + length;
    }
    Ok(scalars)
}

/// A protocol-buffer field: its number and its payload.
enum Field<'a> {
    Varint(u64),
    Fixed64,
    Fixed32([u8; 4]),
    Bytes(&'a [u8]),
}

/// The fields of one message, in order; `None` when it is malformed.
fn fields(mut bytes: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    fn read_varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(value);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = read_varint(&mut bytes)?;
        let field = match key & 7 {
            0 => Field::Varint(read_varint(&mut bytes)?),
            1 => {
                bytes = bytes.get(8..)?;
                Field::Fixed64
            }
            2 => {
                let length = read_varint(&mut bytes)? as usize;
                let (payload, rest) = (bytes.get(..length)?, bytes.get(length..)?);
                bytes = rest;
                Field::Bytes(payload)
            }
            5 => {
                let value = bytes.get(..4)?.try_into().ok()?;
                bytes = &bytes[4..];
                Field::Fixed32(value)
            }
            _ => return None,
        };
        out.push((key >> 3, field));
    }
    Some(out)
}

fn decode_event(data: &[u8], scalars: &mut Vec<Scalar>) -> Option<()> {
    let mut step = 0;
    let mut summary = None;
    for (number, field) in fields(data)? {
        match (number, field) {
            (2, Field::Varint(value)) => step = value,
            (5, Field::Bytes(bytes)) => summary = Some(bytes),
            _ => {}
        }
    }
    let Some(summary) = summary else {
        return Some(());
    };
    for (number, field) in fields(summary)? {
        let (1, Field::Bytes(entry)) = (number, field) else {
            continue;
        };
        let (mut tag, mut value) = (None, None);
        for (number, field) in fields(entry)? {
            match (number, field) {
                (1, Field::Bytes(bytes)) => tag = Some(String::from_utf8(bytes.to_vec()).ok()?),
                (2, Field::Fixed32(bytes)) => value = Some(f32::from_le_bytes(bytes)),
                _ => {}
            }
        }
        if let (Some(tag), Some(value)) = (tag, value) {
            scalars.push(Scalar { step, tag, value });
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masked_crc_matches_tensorflows() {
        // TensorFlow's crc32c test vector: CRC-32C("123456789") = 0xE3069283.
        assert_eq!(
            checksum(CrcAlgorithm::Crc32Iscsi, b"123456789"),
            0xE306_9283
        );
        // TensorFlow's `crc32c::Mask`: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn scalars_survive_a_round_trip_and_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.out.tfevents.test");
        let mut bytes = record(&file_version_event(1.0));
        bytes.extend(record(&scalars_event(
            2.0,
            300,
            [("train/loss", 0.25), ("valid/min_ade", 1.5)],
        )));
        std::fs::write(&path, &bytes).unwrap();
        let scalars = read_scalars(&path).unwrap();
        assert_eq!(
            scalars,
            [
                Scalar {
                    step: 300,
                    tag: "train/loss".into(),
                    value: 0.25
                },
                Scalar {
                    step: 300,
                    tag: "valid/min_ade".into(),
                    value: 1.5
                },
            ]
        );
        let last = bytes.len() - 6;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let message = read_scalars(&path).unwrap_err().to_string();
        assert!(message.contains("data checksum mismatch"), "{message}");
    }
}
