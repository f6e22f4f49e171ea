//! Integration tests of kiln-ml-metrics, one test binary (each links Burn, which is slow):
//! the published test vectors of each benchmark, agreement of the host and tensor paths, and
//! the edge cases.

mod common;

mod actor_miss_rate;
mod agreement;
mod degenerate_probabilities;
mod low_precision;
mod max_distance_miss;
mod overlap_rate;
mod padded_agents;
mod read_back_once;
mod thresholds_in_f64;
mod vectors_argoverse1;
mod vectors_argoverse2;
mod vectors_nuscenes;
mod vectors_waymo;
mod vectors_waymo_trajectory_types;
