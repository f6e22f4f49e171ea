//! Data-parallel shards and the requests that name an epoch's plan.

use std::fmt;

use crate::{Error, Result};

/// One rank's share of a data-parallel world.
///
/// Deserializing checks what [`Shard::new`] checks, so a saved request cannot name a rank
/// outside its world (which would silently take another rank's batches) or a world of zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "UncheckedShard")]
pub struct Shard {
    rank: u32,
    world: u32,
}

/// A shard as written in a file, before [`Shard::new`]'s checks.
#[derive(serde::Deserialize)]
struct UncheckedShard {
    rank: u32,
    world: u32,
}

impl TryFrom<UncheckedShard> for Shard {
    type Error = Error;

    fn try_from(shard: UncheckedShard) -> Result<Self> {
        Shard::new(shard.rank, shard.world)
    }
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
        assert_eq!(
            Shard::new(0, 0).unwrap_err(),
            Error::InvalidShard { rank: 0, world: 0 }
        );
    }

    #[test]
    fn deserialized_shards_and_requests_are_checked() {
        let shard: Shard = serde_json::from_str(r#"{"rank":1,"world":2}"#).unwrap();
        assert_eq!(shard, Shard::new(1, 2).unwrap());
        for bad in [r#"{"rank":3,"world":2}"#, r#"{"rank":0,"world":0}"#] {
            let error = serde_json::from_str::<Shard>(bad).unwrap_err().to_string();
            assert!(error.contains("invalid shard"), "{bad}: {error}");
        }
        let request = r#"{"seed":1,"epoch":0,"shard":{"rank":2,"world":2}}"#;
        let error = serde_json::from_str::<PlanRequest>(request)
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank 2 of world size 2"), "{error}");
        let saved = PlanRequest::new(5, 3).with_shard(Shard::new(1, 4).unwrap());
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<PlanRequest>(&json).unwrap(), saved);
    }
}
