//! The largest batch that fits: [`BatchSizeFinder`] in Lightning's `power` and `binsearch`
//! modes and Accelerate's `shrink` mode, in process or one child process per trial.

mod child;
mod finder;
mod out_of_memory;
mod search;
mod trial;

pub use child::{ChildCommand, RESULT_PREFIX, TRIAL_ENV, serve_child_trial};
pub use finder::{BatchSizeFinder, FinderReport};
pub use out_of_memory::is_out_of_memory;
pub use search::FinderMode;
pub use trial::Trial;
