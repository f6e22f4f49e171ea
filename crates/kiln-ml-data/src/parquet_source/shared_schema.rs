//! One Parquet schema descriptor per distinct schema, shared by every file that has it.
//!
//! A dataset's files nearly always share one schema, yet each footer decodes into a descriptor
//! of its own, which every column chunk's metadata points into. Under a shuffled plan each
//! read is of another file, so setting up its reader walked a descriptor out of cache (about
//! 1% of a per-sample block-shuffle epoch's CPU in the `block_shuffle` example). Shared, the
//! descriptor stays in cache, and the footer's schema is decoded once per file instead of
//! being built into a tree of its own.

use std::sync::{Arc, Mutex, PoisonError};

use parquet::schema::types::{SchemaDescPtr, SchemaDescriptor};

/// The schemas shared, the newest last; at most [`MOST_SHARED_SCHEMAS`].
static SHARED_SCHEMAS: Mutex<Vec<SchemaDescPtr>> = Mutex::new(Vec::new());

/// Distinct schemas kept: a process reads a few. Past this many, the oldest is forgotten (its
/// files keep their descriptor; later files of that schema get another).
const MOST_SHARED_SCHEMAS: usize = 16;

/// The shared descriptor equal to `schema` (`schema` itself, now shared, when none is).
pub(crate) fn shared(schema: SchemaDescriptor) -> SchemaDescPtr {
    let mut schemas = SHARED_SCHEMAS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = schemas.iter().find(|known| ***known == schema) {
        return Arc::clone(known);
    }
    let schema = Arc::new(schema);
    if schemas.len() == MOST_SHARED_SCHEMAS {
        schemas.remove(0);
    }
    schemas.push(Arc::clone(&schema));
    schema
}

#[cfg(test)]
mod tests {
    use parquet::schema::parser::parse_message_type;

    use super::*;

    fn schema(message: &str) -> SchemaDescriptor {
        SchemaDescriptor::new(Arc::new(parse_message_type(message).unwrap()))
    }

    #[test]
    fn equal_schemas_share_one_descriptor_and_others_do_not() {
        let message = "message m { required int64 id; required float x; }";
        let (first, second) = (shared(schema(message)), shared(schema(message)));
        assert!(Arc::ptr_eq(&first, &second));
        let other = shared(schema(
            "message m { required int64 id; required double x; }",
        ));
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(
            *other,
            schema("message m { required int64 id; required double x; }")
        );
    }
}
