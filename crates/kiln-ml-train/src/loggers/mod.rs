//! Loggers: observers that write the run's scalars to files (Lightning's `CSVLogger` and
//! `TensorBoardLogger`).

mod csv;
mod rows;
mod tensorboard;
mod tfrecord;

pub use csv::CsvLogger;
pub use rows::{LogRow, LogRows};
pub use tensorboard::TensorBoardLogger;
pub use tfrecord::{Scalar, read_scalars};
