//! The doctor's advice, as pure functions of what it found, so each rule can be tested on
//! machines the tests do not run on.

mod advice;
mod batch;
#[cfg(test)]
mod fixtures;
mod precision;
mod recommendation;
mod target;
mod workers;

pub(super) use advice::recommend;
pub use recommendation::{BatchAdvice, Recommendation, Recommendations};
