//! Turning a decoded row group (an Arrow `RecordBatch`) into user items.

use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use kiln_ml_core::Fingerprint;

/// Turns the rows of one decoded row group into items, one item per row.
///
/// The decoder sees a row group a chunk at a time (the whole row group when it has at most
/// 8,192 rows, else consecutive chunks of at most that many, in order), so it can look each
/// column up once per chunk and then walk the rows (see
/// [`required_values`](crate::required_values) and friends). Items must come out in row order,
/// exactly one per row; a row named in a [`DecodeError`] counts from the chunk's first row (the
/// source reports it counted from the row group's). The [`fingerprint`](RowDecoder::fingerprint) is part
/// of the source's layout fingerprint, so caches keyed by the layout notice a changed decoder.
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_data::arrow_array::{Float32Array, RecordBatch};
/// use kiln_ml_data::arrow_array::types::Float32Type;
/// use kiln_ml_data::{decoder_fn, required_values, RowDecoder};
///
/// let doubled = decoder_fn("doubled-x", 1, |batch: &RecordBatch| {
///     let x = required_values::<Float32Type>(batch, "x")?;
///     Ok(x.iter().map(|v| v * 2.0).collect::<Vec<f32>>())
/// });
/// let batch = RecordBatch::try_from_iter([
///     ("x", Arc::new(Float32Array::from(vec![1.0, 2.5])) as _),
/// ]).unwrap();
/// let mut items = Vec::new();
/// doubled.decode(&batch, &mut items).unwrap();
/// assert_eq!(items, [2.0, 5.0]);
/// ```
pub trait RowDecoder: Send + Sync {
    /// One decoded row.
    type Item: Send;

    /// Appends one item per row of `batch` (a row group or a chunk of one) to `items`, in row
    /// order.
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<Self::Item>) -> Result<(), DecodeError>;

    /// Identifies the decoder's behaviour (name, version, parameters).
    fn fingerprint(&self) -> Fingerprint;
}

impl<T: RowDecoder + ?Sized> RowDecoder for &T {
    type Item = T::Item;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<Self::Item>) -> Result<(), DecodeError> {
        (**self).decode(batch, items)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

impl<T: RowDecoder + ?Sized> RowDecoder for Box<T> {
    type Item = T::Item;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<Self::Item>) -> Result<(), DecodeError> {
        (**self).decode(batch, items)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

impl<T: RowDecoder + ?Sized> RowDecoder for Arc<T> {
    type Item = T::Item;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<Self::Item>) -> Result<(), DecodeError> {
        (**self).decode(batch, items)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

/// Why a [`RowDecoder`] rejected a row group: the column and row when known, and a reason.
///
/// The Parquet source adds the file and row group before reporting it as
/// [`Error::Decode`](crate::Error::Decode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    column: Option<String>,
    row: Option<u64>,
    reason: String,
}

impl DecodeError {
    /// A decoding failure with a reason; add the place with [`in_column`](Self::in_column) and
    /// [`at_row`](Self::at_row).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            column: None,
            row: None,
            reason: reason.into(),
        }
    }

    /// The same error, naming the column.
    pub fn in_column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }

    /// The same error, naming the row: counted from the first row of the chunk the decoder
    /// was given (the source turns it into the row inside the row group).
    pub fn at_row(mut self, row: u64) -> Self {
        self.row = Some(row);
        self
    }

    /// The column, when named.
    pub fn column(&self) -> Option<&str> {
        self.column.as_deref()
    }

    /// The row, when named: from the chunk's first row as the decoder gave it, from the row
    /// group's once the source reports the error.
    pub fn row(&self) -> Option<u64> {
        self.row
    }

    /// What was wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(column) = &self.column {
            write!(f, "column {column:?}: ")?;
        }
        if let Some(row) = self.row {
            write!(f, "row {row}: ")?;
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// A [`RowDecoder`] made from a closure over a decoded chunk; see [`decoder_fn`].
#[derive(Clone)]
pub struct FnDecoder<F> {
    fingerprint: Fingerprint,
    function: F,
}

impl<F> fmt::Debug for FnDecoder<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnDecoder")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl<F> FnDecoder<F> {
    /// A closure decoder with an explicit fingerprint (include every parameter in it).
    pub fn new(fingerprint: Fingerprint, function: F) -> Self {
        Self {
            fingerprint,
            function,
        }
    }
}

/// A decoder from a closure that turns a decoded chunk into its items, fingerprinted by its
/// name and version: bump the version whenever the closure's behaviour changes.
pub fn decoder_fn<F>(name: &str, version: u64, function: F) -> FnDecoder<F> {
    let fingerprint = Fingerprint::builder()
        .str("kiln-data decoder")
        .str(name)
        .u64(version)
        .finish();
    FnDecoder::new(fingerprint, function)
}

impl<I, F> RowDecoder for FnDecoder<F>
where
    I: Send,
    F: Fn(&RecordBatch) -> Result<Vec<I>, DecodeError> + Send + Sync,
{
    type Item = I;
    fn decode(&self, batch: &RecordBatch, items: &mut Vec<I>) -> Result<(), DecodeError> {
        let decoded = (self.function)(batch)?;
        if items.is_empty() {
            // The usual case: take the closure's vector instead of moving every item again.
            *items = decoded;
        } else {
            items.extend(decoded);
        }
        Ok(())
    }
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_show_column_and_row() {
        let error = DecodeError::new("null value").in_column("x").at_row(4);
        assert_eq!(error.to_string(), "column \"x\": row 4: null value");
        assert_eq!(DecodeError::new("bad").to_string(), "bad");
    }

    #[test]
    fn closure_decoders_differ_by_version() {
        let noop = |_: &RecordBatch| Ok(Vec::<u8>::new());
        assert_ne!(
            decoder_fn("a", 1, noop).fingerprint(),
            decoder_fn("a", 2, noop).fingerprint()
        );
    }
}
