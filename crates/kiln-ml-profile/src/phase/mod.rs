//! Per-phase step timing: the [`PhaseTimer`] observer, its report and its Chrome trace.

mod mode;
mod report;
mod rows;
mod span;
mod state;
mod tally;
mod timer;
mod trace;

pub use mode::TimingMode;
pub use report::{PhaseReport, PhaseRow};
pub use span::{Action, Span};
pub use state::EpochBounds;
pub use timer::PhaseTimer;
pub use trace::{chrome_trace, write_chrome_trace};
