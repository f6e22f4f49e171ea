//! Where a run's data stands: the whole resume state of data loading.

use std::fmt;

/// Where a run stands: the whole state needed to resume data loading exactly.
///
/// `consumed` counts samples of the epoch's **global** order already delivered, all ranks
/// together, so a position saved by a run on W ranks can be resumed on W' ranks (see
/// [`Plan`](crate::Plan) for the sharding rule and when that is exact).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Position {
    /// The epoch, counted from zero.
    pub epoch: u64,
    /// Samples of the epoch's global order already delivered (all ranks together).
    pub consumed: u64,
}

impl Position {
    /// The start of an epoch.
    pub fn start_of(epoch: u64) -> Self {
        Self { epoch, consumed: 0 }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {} after {} samples", self.epoch, self.consumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_by_epoch_then_consumed() {
        let early = Position {
            epoch: 1,
            consumed: 900,
        };
        let late = Position {
            epoch: 2,
            consumed: 0,
        };
        assert!(early < late);
        assert_eq!(Position::start_of(2), late);
    }
}
