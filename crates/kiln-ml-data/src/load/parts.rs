//! What the launcher, the coordinator and the epoch hand each other: the start mode, the
//! delivered batches, the channels and thread of a started epoch, and the `Launch` seam.
//!
//! A leaf module: it imports none of its siblings' types but the schedule, so launch.rs,
//! coordinator.rs and epoch.rs depend on it and never on each other in a circle.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use kiln_ml_core::{Observer, Plan};

use super::schedule::EpochSchedule;
use super::staged::Staged;
use crate::Result;

/// Whether the consumer waits for an epoch's first batch from the moment it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Started to be consumed now.
    Awaited,
    /// Started early by [`Epoch::prefetch_next`](crate::Epoch::prefetch_next) while the
    /// previous epoch is still consumed: none of its batches is awaited until its first credit,
    /// and until then it queues work only for idle workers.
    InBackground,
}

/// A batch (by index within the epoch), perhaps left for the consumer to finish, or the error
/// that ends the epoch at that batch.
pub(crate) type Delivery<O> = (u64, Result<Staged<O>>);

/// Starts epochs whose batches are `O`, whatever the source and collation behind them.
pub(crate) trait Launch<O>: Send + Sync {
    /// Checks the plan against the source and starts its coordinator.
    fn launch(self: Arc<Self>, plan: Plan, start: Start) -> Result<EpochParts<O>>;
}

/// The channels and thread an [`Epoch`](crate::Epoch) consumes from.
pub(crate) struct EpochParts<O> {
    pub(crate) plan: Arc<Plan>,
    pub(crate) schedule: EpochSchedule,
    pub(crate) output: Receiver<Delivery<O>>,
    pub(crate) credits: Sender<u64>,
    /// How many batches the consumer takes between credit messages (at most the prefetch
    /// depth, so the coordinator never waits for a credit it needs).
    pub(crate) credit_every: u64,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) coordinator: Option<JoinHandle<()>>,
    pub(crate) observers: Arc<Vec<Arc<dyn Observer>>>,
    pub(crate) reads_dispatched: Arc<AtomicBool>,
    pub(crate) launcher: Arc<dyn Launch<O>>,
}
