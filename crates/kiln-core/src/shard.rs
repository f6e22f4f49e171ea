//! Data-parallel shards and the requests that name an epoch's plan.

use std::fmt;

use crate::{Error, Result};

/// One rank's share of a data-parallel world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    rank: u32,
    world: u32,
}

impl Shard {
    /// The whole dataset for a single process.
    pub const SINGLE: Shard = Shard { rank: 0, world: 1 };

    /// Rank `rank` of `world` ranks; fails unless `world >= 1` and `rank < world`.
    pub fn new(rank: u32, world: u32) -> Result<Self> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidShard { rank, world });
        }
        Ok(Self { rank, world })
    }

    /// This rank, counted from zero.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn world(&self) -> u32 {
        self.world
    }
}

impl Default for Shard {
    fn default() -> Self {
        Self::SINGLE
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.world)
    }
}

/// Everything besides the layout that an epoch plan is a function of.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct PlanRequest {
    /// The run's seed; with the epoch it selects the permutation.
    pub seed: u64,
    /// The epoch, counted from zero.
    pub epoch: u64,
    /// Which rank's share to plan.
    pub shard: Shard,
}

impl PlanRequest {
    /// A request for a single process.
    pub fn new(seed: u64, epoch: u64) -> Self {
        Self {
            seed,
            epoch,
            shard: Shard::SINGLE,
        }
    }

    /// The same request for another shard.
    pub fn with_shard(self, shard: Shard) -> Self {
        Self { shard, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_rejects_impossible_ranks() {
        assert!(Shard::new(0, 1).is_ok());
        assert!(Shard::new(3, 4).is_ok());
        assert_eq!(
            Shard::new(4, 4).unwrap_err(),
            Error::InvalidShard { rank: 4, world: 4 }
        );
        assert!(Shard::new(0, 0).is_err());
    }
}
