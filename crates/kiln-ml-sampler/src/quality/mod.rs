//! Shuffle-quality measures: how well an order mixes files, next to a uniform permutation.
//!
//! The measures follow kiln's reference (data.md §3). With `f(s)` the file of sample `s`, `n_f`
//! the samples of file `f`, `N` samples in all and batches of `B` consecutive positions:
//!
//! | measure | ideal (uniform permutation) |
//! |---|---|
//! | distinct files per batch D (mean, 5th percentile) | E\[D\] = Σ_f [1 − C(N − n_f, B) / C(N, B)] exactly; percentile by Monte Carlo |
//! | same-file pair rate P_same | P* = Σ_f n_f (n_f − 1) / (N (N − 1)), exactly |
//! | lag-k same-file rate r(k) | P* for every k ≥ 1 |
//! | batch file entropy (bits) | Monte Carlo |
//! | Spearman ρ(position, sample id) | 0 ± 1 / √(n − 1) |
//!
//! [`measure`] reports each for the whole order and for its first and last windows (10 batches
//! by default), where buffer shuffles are weakest. [`residency`] says how much data a loader
//! must hold to execute a plan, and [`SizeFigures`] what samples of different sizes cost a
//! batch (padding waste, elements per batch). [`measure_plan`] adds the figures of the batches a
//! plan delivers ([`BatchFigures`]: rows, distinct files, padding waste and elements per batch),
//! which size-budget plans need because their batches hold varying numbers of samples.
//!
//! Spearman's ρ alone is a weak test: any order whose *block* sequence is random has
//! |ρ| ≈ 1/√(blocks), however little it mixes. Read it with the batch measures.

mod batches;
mod groups;
mod ideal;
mod options;
mod report;
mod residency;
mod sizes;
mod spearman;
mod stats;

pub use batches::BatchFigures;
pub use ideal::IdealStats;
pub use options::{Grouping, QualityOptions};
pub use report::{QualityReport, Stretch, measure, measure_plan};
pub use residency::{PlanResidency, residency};
pub use sizes::SizeFigures;
pub use stats::{LagRate, OrderStats};
