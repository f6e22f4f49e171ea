//! The schema of a whole source: the files' columns matched by name, checked to agree, and how
//! each file's batches are brought to it.

use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use kiln_ml_core::Fingerprint;

use super::conform::{ColumnSource, Conform};
use super::file::ParquetFile;
use super::input::Found;
use super::unify::{type_difference, unify};
use crate::{Error, Result};

/// The columns every decoded batch of a source has, in order, and one [`Conform`] per file.
///
/// The first file is the reference. The columns are the projection in the order asked for, or
/// else the reference's columns in its order followed by the partition keys. Every other file
/// must have the same columns (by name, in any order) and partition keys, with types that hold
/// the same values ([`type_difference`]); a column is nullable when it is in any file.
#[derive(Debug, Clone)]
pub(crate) struct SourceSchema {
    schema: SchemaRef,
    conforms: Vec<Conform>,
    fingerprint: Fingerprint,
}

impl SourceSchema {
    /// Checks the files against the first one and plans each file's batches. `found[i]` is how
    /// `files[i]` was found; `columns` is the projection (partition keys included).
    pub(crate) fn new(
        files: &[ParquetFile],
        found: &[Found],
        columns: Option<&[String]>,
    ) -> Result<Self> {
        let (Some(first), Some(first_found)) = (files.first(), found.first()) else {
            return Ok(Self::plan(Arc::new(Schema::empty()), Vec::new(), found));
        };
        let keys: Vec<&str> = first_found.partitions.keys().collect();
        let reference = &first.projection().schema;
        let names: Vec<String> = match columns {
            Some(columns) => {
                let mut names: Vec<String> = Vec::with_capacity(columns.len());
                for column in columns {
                    if !names.contains(column) {
                        names.push(column.clone());
                    }
                }
                names
            }
            None => reference
                .fields()
                .iter()
                .map(|field| field.name().clone())
                .chain(keys.iter().map(|key| (*key).to_owned()))
                .collect(),
        };
        let mut fields: Vec<Field> = Vec::with_capacity(names.len());
        for name in &names {
            fields.push(match reference.field_with_name(name) {
                Ok(field) if !keys.contains(&name.as_str()) => field.clone(),
                // A partition column: nullable only where some path holds the Hive null.
                _ => Field::new(name, DataType::Utf8, false),
            });
        }
        for (file, found) in files.iter().zip(found) {
            check_names(file, found, first, &keys, columns.is_none())?;
            for field in &mut fields {
                let name = field.name().clone();
                if keys.contains(&name.as_str()) {
                    let value = found.partitions.value(&name).flatten();
                    *field = field
                        .clone()
                        .with_nullable(field.is_nullable() || value.is_none());
                    continue;
                }
                let Ok(here) = file.projection().schema.field_with_name(&name) else {
                    return Err(mismatch(
                        file.path(),
                        first.path(),
                        format!("column {name:?} is missing here"),
                    ));
                };
                let expected = reference
                    .field_with_name(&name)
                    .map_err(|error| mismatch(file.path(), first.path(), error.to_string()))?;
                if let Some(difference) = type_difference(here.data_type(), expected.data_type()) {
                    return Err(mismatch(
                        file.path(),
                        first.path(),
                        format!("column {name:?} is {difference}"),
                    ));
                }
                *field = Field::new(
                    name,
                    unify(field.data_type(), here.data_type()),
                    field.is_nullable() || here.is_nullable(),
                )
                .with_metadata(field.metadata().clone());
            }
        }
        let schema = Arc::new(Schema::new(fields).with_metadata(reference.metadata().clone()));
        let conforms = files
            .iter()
            .zip(found)
            .map(|(file, found)| conform(file, found, &schema))
            .collect();
        Ok(Self::plan(schema, conforms, found))
    }

    fn plan(schema: SchemaRef, conforms: Vec<Conform>, found: &[Found]) -> Self {
        let mut builder = Fingerprint::builder()
            .str("kiln-data source schema")
            .u64(schema.fields().len() as u64);
        for field in schema.fields() {
            builder = builder
                .str(field.name())
                .str(&field.data_type().to_string())
                .u64(u64::from(field.is_nullable()));
        }
        // Partition values come from the paths the files were found by, which the layout (keyed
        // by canonical paths) does not see.
        for found in found {
            builder = builder.str(&found.partitions.describe());
        }
        Self {
            schema,
            conforms,
            fingerprint: builder.finish(),
        }
    }

    /// The schema of every batch the source yields.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Identifies the columns, their types and every file's partition values.
    pub(crate) fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// A decoded batch of file `file` (at `path`, row group `row_group`) in the source schema.
    pub(crate) fn conform(
        &self,
        file: usize,
        batch: RecordBatch,
        path: &Path,
        row_group: usize,
    ) -> Result<RecordBatch> {
        let Some(conform) = self.conforms.get(file) else {
            return Ok(batch);
        };
        conform
            .apply(batch, &self.schema)
            .map_err(|(column, reason)| Error::CorruptParquet {
                path: path.to_owned(),
                row_group: Some(row_group),
                column,
                reason: format!("the decoded values do not fit the source's schema: {reason}"),
            })
    }
}

fn mismatch(path: &Path, reference: &Path, difference: String) -> Error {
    Error::SchemaMismatch {
        path: path.to_owned(),
        reference: reference.to_owned(),
        difference,
    }
}

/// Names that cannot be matched: a column twice in the file, a partition key that is also a
/// column, other partition keys than the reference's, or (reading all columns) a column the
/// reference does not have.
fn check_names(
    file: &ParquetFile,
    found: &Found,
    reference: &ParquetFile,
    keys: &[&str],
    all_columns: bool,
) -> Result<()> {
    let here = &file.projection().schema;
    for field in here.fields() {
        let count = here
            .fields()
            .iter()
            .filter(|other| other.name() == field.name())
            .count();
        if count > 1 {
            return Err(Error::DuplicateColumn {
                path: file.path().to_owned(),
                column: field.name().clone(),
                count,
            });
        }
        if keys.contains(&field.name().as_str()) {
            return Err(Error::Partition {
                path: file.path().to_owned(),
                reason: format!(
                    "the partition key {:?} is also a column of the file; choose the columns \
                     with `.columns([...])` (a partition key named there reads the directory's \
                     value) or read the file's own with `.hive_partitioning(false)`",
                    field.name()
                ),
            });
        }
    }
    let here_keys: Vec<&str> = found.partitions.keys().collect();
    if here_keys != keys {
        return Err(mismatch(
            file.path(),
            reference.path(),
            format!(
                "its partition directories give the columns [{}] but the reference's give [{}]",
                here_keys.join(", "),
                keys.join(", ")
            ),
        ));
    }
    if !all_columns {
        return Ok(());
    }
    // Every file is checked against the first, so this is only needed here: a column the first
    // file lacks (the first file's extra columns show up as missing in this one).
    let reference_schema = &reference.projection().schema;
    let Some(extra) = here
        .fields()
        .iter()
        .find(|field| reference_schema.field_with_name(field.name()).is_err())
    else {
        return Ok(());
    };
    Err(mismatch(
        file.path(),
        reference.path(),
        format!(
            "column {:?} is here but not in the reference (choose the columns all files share \
             with `.columns([...])`)",
            extra.name()
        ),
    ))
}

/// Where each column of `schema` comes from in the file's batches.
fn conform(file: &ParquetFile, found: &Found, schema: &SchemaRef) -> Conform {
    let here = &file.projection().schema;
    let mut identity = here.fields().len() == schema.fields().len();
    let columns = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(position, field)| match here.index_of(field.name()) {
            Ok(index) => {
                let convert = here.field(index).data_type() != field.data_type();
                identity &= index == position && here.field(index) == field.as_ref();
                ColumnSource::File { index, convert }
            }
            Err(_) => {
                identity = false;
                let value = found.partitions.value(field.name()).flatten();
                ColumnSource::Partition(value.map(str::to_owned))
            }
        })
        .collect();
    Conform::new(columns, identity)
}
