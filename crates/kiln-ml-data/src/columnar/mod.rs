//! Columnar batches: a batch assembled column by column from the decoded Arrow chunks its
//! rows sit in, instead of one value per sample.

mod burn_columns;
mod collate;
mod float_elements;
mod float_rows;
mod gather;
mod sequences;

pub use burn_columns::{BurnColumnar, ColumnBatcher, float_matrix, int_vector};
pub use collate::columnar_fn;
pub use gather::gather_rows;
pub use sequences::{PackedSequences, PaddedSequences, packed_list, padded_list};
