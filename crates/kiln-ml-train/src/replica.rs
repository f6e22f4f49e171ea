//! One replica of a data-parallel run: its ranks, its device and its peer id in the collective.

use kiln_ml_core::Shard;

use crate::collective::Collective;

/// One model replica of a data-parallel run, as [`DataParallel::run`](crate::DataParallel::run)
/// hands it to the closure that trains it.
///
/// Give it to the trainer with [`Trainer::join`](crate::Trainer::join), and plan the replica's
/// data with [`shard`](Self::shard): every replica reads its rank's share of the same global
/// order.
#[derive(Debug, Clone)]
pub struct Replica<D> {
    pub(crate) rank: u32,
    pub(crate) world: u32,
    pub(crate) local_rank: u32,
    pub(crate) node_rank: u32,
    pub(crate) device: D,
    /// How this replica calls the others; across nodes its session count is shared by every
    /// trainer that joins the replica, so sessions keep alternating (see `collective.rs`).
    pub(crate) collective: Collective,
}

impl<D> Replica<D> {
    /// This replica's rank among all replicas of all nodes, from zero.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of replicas, all nodes together.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// This replica's rank on its node, from zero.
    pub fn local_rank(&self) -> u32 {
        self.local_rank
    }

    /// The node this replica runs on, from zero.
    pub fn node_rank(&self) -> u32 {
        self.node_rank
    }

    /// The device this replica trains on.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The share of the data this replica plans (kiln's sharding rule: see
    /// [`Plan`](kiln_ml_core::Plan)).
    pub fn shard(&self) -> Shard {
        Shard::new(self.rank, self.world).expect("a replica's rank is below its world size")
    }

    /// Whether this is rank 0: the replica whose weights every replica starts from, and the
    /// one that writes checkpoints.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// How this replica calls the others.
    pub(crate) fn collective(&self) -> Collective {
        self.collective.clone()
    }
}

/// What a trainer keeps of the replica it joined.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    pub(crate) collective: Collective,
    pub(crate) rank: u32,
    pub(crate) world: u32,
}

impl Membership {
    /// An error of a collective operation, naming this replica and what it was doing.
    pub(crate) fn error(&self, during: &'static str, message: String) -> crate::Error {
        let message = if message.contains("Mismatch") {
            format!(
                "{message}: the replicas made different collective calls (unequal batches per \
                 epoch, or code that runs on some ranks only: see docs/training.md, Data parallelism)"
            )
        } else {
            message
        };
        crate::Error::Collective {
            rank: self.rank,
            world: self.world,
            during,
            message,
        }
    }
}
