//! Column projection: which columns of a file are decoded, and the schema check across files.

use std::path::Path;
use std::sync::Arc;

use arrow_schema::{Schema, SchemaRef};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::{Error, Result};

/// The decoded columns of one file: the reader's mask, the Parquet leaf columns behind it and
/// the Arrow schema of the batches it yields.
#[derive(Debug, Clone)]
pub(crate) struct Projection {
    pub(crate) mask: ProjectionMask,
    pub(crate) leaves: Vec<usize>,
    pub(crate) schema: SchemaRef,
}

impl Projection {
    /// The projection of `columns` (top-level names; all columns when `None`) in a file.
    pub(crate) fn new(
        path: &Path,
        metadata: &ArrowReaderMetadata,
        columns: Option<&[String]>,
    ) -> Result<Self> {
        let descriptor = metadata.parquet_schema();
        let root_names: Vec<&str> = descriptor
            .root_schema()
            .get_fields()
            .iter()
            .map(|field| field.name())
            .collect();
        let mut roots: Vec<usize> = match columns {
            None => (0..root_names.len()).collect(),
            Some(columns) => columns
                .iter()
                .map(|column| {
                    root_names
                        .iter()
                        .position(|name| name == column)
                        .ok_or_else(|| Error::MissingColumn {
                            path: path.to_owned(),
                            column: column.clone(),
                            available: root_names.iter().map(|name| (*name).to_owned()).collect(),
                        })
                })
                .collect::<Result<_>>()?,
        };
        // The reader yields columns in file order whatever order they were asked in.
        roots.sort_unstable();
        roots.dedup();
        let leaves = (0..descriptor.num_columns())
            .filter(|&leaf| roots.contains(&descriptor.get_column_root_idx(leaf)))
            .collect();
        let schema = metadata
            .schema()
            .project(&roots)
            .map_err(|error| Error::CorruptParquet {
                path: path.to_owned(),
                row_group: None,
                column: None,
                reason: format!("its Arrow schema does not match its Parquet schema: {error}"),
            })?;
        Ok(Self {
            mask: ProjectionMask::roots(descriptor, roots),
            leaves,
            schema: Arc::new(schema),
        })
    }
}

/// The first difference between two projected schemas (names, order and types; nullability and
/// metadata are ignored because writers differ on them), or `None` when they agree.
pub(crate) fn schema_difference(schema: &Schema, reference: &Schema) -> Option<String> {
    let names = |schema: &Schema| -> Vec<String> {
        schema
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect()
    };
    if names(schema) != names(reference) {
        return Some(format!(
            "its columns are [{}] but the reference has [{}]",
            names(schema).join(", "),
            names(reference).join(", ")
        ));
    }
    schema
        .fields()
        .iter()
        .zip(reference.fields())
        .find(|(field, expected)| field.data_type() != expected.data_type())
        .map(|(field, expected)| {
            format!(
                "column {:?} is {} here but {} in the reference",
                field.name(),
                field.data_type(),
                expected.data_type()
            )
        })
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field};

    use super::*;

    fn schema(fields: &[(&str, DataType, bool)]) -> Schema {
        Schema::new(
            fields
                .iter()
                .map(|(name, kind, nullable)| Field::new(*name, kind.clone(), *nullable))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn equal_schemas_agree_whatever_the_nullability() {
        let a = schema(&[
            ("x", DataType::Float32, true),
            ("id", DataType::Int64, false),
        ]);
        let b = schema(&[
            ("x", DataType::Float32, false),
            ("id", DataType::Int64, true),
        ]);
        assert_eq!(schema_difference(&a, &b), None);
    }

    #[test]
    fn differences_name_the_column() {
        let a = schema(&[("x", DataType::Float64, true)]);
        let b = schema(&[("x", DataType::Float32, true)]);
        assert_eq!(
            schema_difference(&a, &b).unwrap(),
            "column \"x\" is Float64 here but Float32 in the reference"
        );
        let c = schema(&[("y", DataType::Float32, true)]);
        assert!(
            schema_difference(&c, &b)
                .unwrap()
                .contains("[y] but the reference has [x]")
        );
    }
}
