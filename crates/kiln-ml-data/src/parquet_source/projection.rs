//! Column projection: which columns of a file are decoded.

use std::path::Path;
use std::sync::Arc;

use arrow_schema::SchemaRef;
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
                    // A name the file uses twice cannot tell which column is meant.
                    let count = root_names.iter().filter(|name| *name == column).count();
                    if count > 1 {
                        return Err(Error::DuplicateColumn {
                            path: path.to_owned(),
                            column: column.clone(),
                            count,
                        });
                    }
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
