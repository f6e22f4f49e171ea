//! How a replica calls the others: on one node, the replicas meet on their own threads (see
//! `replica_group.rs`); across nodes, through one burn-collective session per operation.
//!
//! burn-collective 0.21's global level runs one operation per registration: its end-of-operation
//! sync clears a copy of the list of nodes that synced, never the list, so a second operation in
//! the same registration waits forever (and its transfer ids repeat, tracel-ai/burn#4549). Across
//! nodes kiln therefore registers, runs one all-reduce and leaves, every time. Sessions alternate
//! between two coordinators (and two tensor-service ports per node): a node can only start session
//! k + 1 after every node joined session k, which each did after the coordinator acknowledged its
//! leaving session k - 1, so the coordinator of k + 1 never sees a node of an unfinished session.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::collective::{
    CollectiveConfig, PeerId, ReduceOperation, all_reduce, finish_collective, register,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use crate::replica_group::ReplicaGroup;

/// A replica's way to the others.
#[derive(Debug, Clone)]
pub(crate) enum Collective {
    /// One node: the replicas of the run meet in their group.
    Local {
        rank: usize,
        group: Arc<ReplicaGroup>,
    },
    /// Many nodes: burn-collective, a session per operation.
    Sessions {
        peer: PeerId,
        sessions: Arc<Sessions>,
    },
}

/// The two alternating global configurations and the number of operations run so far.
#[derive(Debug)]
pub(crate) struct Sessions {
    configs: [CollectiveConfig; 2],
    operations: AtomicU64,
    /// burn-collective's global ring refuses tensors shorter than the node count.
    min_elements: usize,
}

impl Collective {
    /// Replica `rank` of `group` (one node).
    pub(crate) fn local(rank: usize, group: Arc<ReplicaGroup>) -> Self {
        Self::Local { rank, group }
    }

    /// A peer that registers for each operation, alternating between two configurations.
    pub(crate) fn per_operation(peer: PeerId, configs: [CollectiveConfig; 2], nodes: u32) -> Self {
        Self::Sessions {
            peer,
            sessions: Arc::new(Sessions {
                configs,
                operations: AtomicU64::new(0),
                min_elements: nodes as usize,
            }),
        }
    }

    /// The element-wise sum over every replica of `pieces` concatenated. The concatenation is a
    /// new tensor, which no clone held by the caller shares (see `replica_group.rs` for why that
    /// matters under burn-fusion).
    pub(crate) fn sum<B: Backend>(
        &self,
        mut pieces: Vec<Tensor<B, 1>>,
    ) -> Result<Tensor<B, 1>, String> {
        let (peer, sessions) = match self {
            Self::Local { rank, group } => return group.sum(*rank, pieces),
            Self::Sessions { peer, sessions } => (*peer, sessions),
        };
        let device = pieces[0].device();
        let elements: usize = pieces.iter().map(|piece| piece.dims()[0]).sum();
        // Zeros pad a short tensor to the ring's minimum; the sum is sliced back below.
        if elements < sessions.min_elements {
            pieces.push(Tensor::zeros([sessions.min_elements - elements], &device));
        }
        let tensor = Tensor::cat(pieces, 0);
        let primitive = tensor.into_primitive().tensor();
        let operation = sessions.operations.fetch_add(1, Ordering::Relaxed);
        let config = sessions.configs[(operation % 2) as usize].clone();
        register::<B>(peer, device, config)
            .map_err(|error| format!("joining session {operation}: {error:?}"))?;
        let sum = all_reduce::<B>(peer, primitive, ReduceOperation::Sum)
            .map_err(|error| format!("in session {operation}: {error:?}"))?;
        finish_collective::<B>(peer)
            .map_err(|error| format!("leaving session {operation}: {error:?}"))?;
        let sum = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(sum));
        Ok(if sum.dims()[0] > elements {
            sum.narrow(0, 0, elements)
        } else {
            sum
        })
    }

    /// The call a replica makes when its training ended, on one node: a replica still training
    /// meets it with a sum, and both fail ("Mismatch") instead of one training alone. Across
    /// nodes every operation is a session of its own, and there is none.
    pub(crate) fn close(&self) -> Result<(), String> {
        match self {
            Self::Local { rank, group } => group.close(*rank),
            Self::Sessions { .. } => Ok(()),
        }
    }
}
