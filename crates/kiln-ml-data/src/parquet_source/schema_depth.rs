//! How deeply a footer's schema nests, read from its Thrift bytes before the Parquet reader
//! parses them: the reader builds the schema tree recursively, and a footer nesting groups a
//! few thousand levels deep (some 60 KB) overflows a thread's stack, which aborts the process
//! rather than panicking.
//!
//! Only the start of `FileMetaData` is read: field 1 (`version`) and field 2 (`schema`, the
//! schema elements flattened depth first), and in each element only field 5 (`num_children`).
//! Unknown fields are skipped as the Parquet reader skips them (every Thrift compact type, UUIDs
//! included, nested up to 64 levels), so a footer the scan cannot read is one the reader's own
//! parse refuses: that ends the scan without a verdict, and the reader reports it.

/// Deeper schemas are refused. Real schemas nest a few levels (lists of structs of lists);
/// generated protobuf schemas a few dozen.
pub(crate) const MAX_SCHEMA_DEPTH: usize = 128;

/// Nesting of skipped fields: the Parquet reader's own limit (a crafted unknown field nested
/// deeper fails its parse too).
const MAX_SKIP_DEPTH: u32 = 64;

/// The depth of the schema's deepest element (the root's children are at depth 1) when it
/// exceeds `limit`;
/// `None` when it does not, or when the bytes cannot be scanned.
pub(crate) fn schema_deeper_than(metadata: &[u8], limit: usize) -> Option<usize> {
    let mut scan = Scan {
        bytes: metadata,
        at: 0,
    };
    let mut last_field = 0i16;
    loop {
        let (field, kind) = scan.field_header(&mut last_field)?;
        match (field, kind) {
            (_, STOP) => return None,
            (2, LIST) => return scan.schema_depth(limit),
            _ => scan.skip(kind, 0)?,
        }
    }
}

const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
const UUID: u8 = 13;

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7F).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn zigzag(&mut self) -> Option<i64> {
        let value = self.varint()?;
        Some((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    /// A struct field's id and type (`STOP` ends the struct).
    fn field_header(&mut self, last: &mut i16) -> Option<(i16, u8)> {
        let byte = self.byte()?;
        let kind = byte & 0x0F;
        if kind == STOP {
            return Some((0, STOP));
        }
        let delta = i16::from(byte >> 4);
        *last = if delta == 0 {
            i16::try_from(self.zigzag()?).ok()?
        } else {
            last.checked_add(delta)?
        };
        Some((*last, kind))
    }

    /// A list's or set's element type and size.
    fn list_header(&mut self) -> Option<(u8, u64)> {
        let byte = self.byte()?;
        let size = match byte >> 4 {
            15 => self.varint()?,
            size => u64::from(size),
        };
        Some((byte & 0x0F, size))
    }

    fn skip(&mut self, kind: u8, depth: u32) -> Option<()> {
        if depth > MAX_SKIP_DEPTH {
            return None;
        }
        match kind {
            TRUE | FALSE => {}
            BYTE => {
                self.byte()?;
            }
            I16 | I32 | I64 => {
                self.varint()?;
            }
            DOUBLE => self.advance(8)?,
            UUID => self.advance(16)?,
            BINARY => {
                let length = usize::try_from(self.varint()?).ok()?;
                self.advance(length)?;
            }
            LIST | SET => {
                let (element, size) = self.list_header()?;
                for _ in 0..size {
                    // Booleans in a list take a byte each.
                    match element {
                        TRUE | FALSE => self.advance(1)?,
                        _ => self.skip(element, depth + 1)?,
                    }
                }
            }
            MAP => {
                let size = self.varint()?;
                if size > 0 {
                    let types = self.byte()?;
                    for _ in 0..size {
                        self.skip(types >> 4, depth + 1)?;
                        self.skip(types & 0x0F, depth + 1)?;
                    }
                }
            }
            STRUCT => {
                let mut last = 0;
                loop {
                    match self.field_header(&mut last)? {
                        (_, STOP) => break,
                        (_, kind) => self.skip(kind, depth + 1)?,
                    }
                }
            }
            _ => return None,
        }
        Some(())
    }

    fn advance(&mut self, bytes: usize) -> Option<()> {
        self.at = self.at.checked_add(bytes)?;
        (self.at <= self.bytes.len()).then_some(())
    }

    /// Walks the flattened schema elements (after the list's field header), keeping the
    /// number of children still expected at each open level.
    fn schema_depth(&mut self, limit: usize) -> Option<usize> {
        let (element, size) = self.list_header()?;
        if element != STRUCT {
            return None;
        }
        let mut open: Vec<i64> = Vec::new();
        for _ in 0..size {
            let mut last = 0;
            let mut children = 0;
            loop {
                match self.field_header(&mut last)? {
                    (_, STOP) => break,
                    (5, I32) => children = self.zigzag()?,
                    (_, kind) => self.skip(kind, 1)?,
                }
            }
            if let Some(remaining) = open.last_mut() {
                *remaining -= 1;
            }
            if children > 0 {
                open.push(children);
                // The children of the innermost open group (the root's are at depth 1).
                if open.len() > limit {
                    return Some(open.len());
                }
            }
            while open.last().is_some_and(|&remaining| remaining <= 0) {
                open.pop();
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `FileMetaData` prefix: version 1, then `elements` schema elements with these
    /// `num_children` (0: a leaf), each named "n".
    fn footer(children: &[i32]) -> Vec<u8> {
        let mut bytes = vec![0x15, 0x02]; // field 1, i32: version 1
        let count = children.len();
        bytes.push(0x19); // field 2, list
        if count < 15 {
            bytes.push(((count as u8) << 4) | STRUCT);
        } else {
            bytes.push(0xF0 | STRUCT);
            let mut size = count;
            while size >= 0x80 {
                bytes.push((size as u8) | 0x80);
                size >>= 7;
            }
            bytes.push(size as u8);
        }
        for &n in children {
            bytes.extend([0x48, 0x01, b'n']); // field 4, binary "n"
            if n > 0 {
                bytes.push(0x15); // field 5, i32
                bytes.push((n as u8) << 1);
            }
            bytes.push(STOP);
        }
        bytes.push(STOP);
        bytes
    }

    #[test]
    fn flat_and_nested_schemas_within_the_limit_pass() {
        // root { a, b { c, d { e } } }
        let bytes = footer(&[2, 0, 2, 0, 1, 0]);
        assert_eq!(schema_deeper_than(&bytes, 3), None);
        assert_eq!(schema_deeper_than(&bytes, 2), Some(3));
    }

    #[test]
    fn a_chain_of_groups_is_measured() {
        let mut chain = vec![1; 300];
        chain.push(0);
        assert_eq!(
            schema_deeper_than(&footer(&chain), MAX_SCHEMA_DEPTH),
            Some(MAX_SCHEMA_DEPTH + 1)
        );
    }

    #[test]
    fn unknown_fields_the_reader_skips_are_skipped() {
        // Each element of a 300-deep chain carries an unknown UUID field (id 9) and an unknown
        // struct nested 40 levels: the reader skips both, so the scan must too.
        let mut bytes = vec![0x15, 0x02, 0x19, 0xF0 | STRUCT];
        let count = 301usize;
        bytes.extend([(count as u8) | 0x80, (count >> 7) as u8]);
        for index in 0..count {
            bytes.extend([0x48, 0x01, b'n']); // field 4, binary "n"
            if index < 300 {
                bytes.extend([0x15, 1 << 1]); // field 5, i32: one child
            }
            bytes.push(0x40 | UUID); // field 9, uuid
            bytes.extend([7; 16]);
            for _ in 0..40 {
                bytes.push(0x10 | STRUCT); // field +1, struct
            }
            bytes.extend([STOP; 40]);
            bytes.push(STOP);
        }
        bytes.push(STOP);
        assert_eq!(
            schema_deeper_than(&bytes, MAX_SCHEMA_DEPTH),
            Some(MAX_SCHEMA_DEPTH + 1)
        );
    }

    #[test]
    fn bytes_that_do_not_scan_give_no_verdict() {
        assert_eq!(schema_deeper_than(&[], 1), None);
        assert_eq!(schema_deeper_than(&[0x19, 0xFC], 1), None);
        let mut chain = footer(&[1; 40]);
        chain.truncate(chain.len() / 2);
        assert_eq!(schema_deeper_than(&chain, 100), None);
    }
}
