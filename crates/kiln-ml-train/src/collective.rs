//! How a replica calls the others: registered once for the whole run on one node, or, across
//! nodes, one burn-collective session per operation.
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

/// A replica's way to the others.
#[derive(Debug, Clone)]
pub(crate) struct Collective {
    peer: PeerId,
    sessions: Option<Arc<Sessions>>,
}

/// The two alternating global configurations and the number of operations run so far.
#[derive(Debug)]
struct Sessions {
    configs: [CollectiveConfig; 2],
    operations: AtomicU64,
    /// burn-collective's global ring refuses tensors shorter than the node count.
    min_elements: usize,
}

impl Collective {
    /// A peer registered once, for the whole run (one node).
    pub(crate) fn registered(peer: PeerId) -> Self {
        Self {
            peer,
            sessions: None,
        }
    }

    /// A peer that registers for each operation, alternating between two configurations.
    pub(crate) fn per_operation(peer: PeerId, configs: [CollectiveConfig; 2], nodes: u32) -> Self {
        Self {
            peer,
            sessions: Some(Arc::new(Sessions {
                configs,
                operations: AtomicU64::new(0),
                min_elements: nodes as usize,
            })),
        }
    }

    /// The element-wise sum of `tensor` over every replica.
    pub(crate) fn sum<B: Backend>(&self, tensor: Tensor<B, 1>) -> Result<Tensor<B, 1>, String> {
        let device = tensor.device();
        let elements = tensor.dims()[0];
        let sum = match &self.sessions {
            None => all_reduce::<B>(
                self.peer,
                tensor.into_primitive().tensor(),
                ReduceOperation::Sum,
            )
            .map_err(|error| format!("{error:?}"))?,
            Some(sessions) => {
                // Zeros pad a short tensor to the ring's minimum; the sum is sliced back below.
                let tensor = if elements < sessions.min_elements {
                    let padding = Tensor::zeros([sessions.min_elements - elements], &device);
                    Tensor::cat(vec![tensor, padding], 0)
                } else {
                    tensor
                };
                let primitive = tensor.into_primitive().tensor();
                let operation = sessions.operations.fetch_add(1, Ordering::Relaxed);
                let config = sessions.configs[(operation % 2) as usize].clone();
                register::<B>(self.peer, device, config)
                    .map_err(|error| format!("joining session {operation}: {error:?}"))?;
                let sum = all_reduce::<B>(self.peer, primitive, ReduceOperation::Sum)
                    .map_err(|error| format!("in session {operation}: {error:?}"))?;
                finish_collective::<B>(self.peer)
                    .map_err(|error| format!("leaving session {operation}: {error:?}"))?;
                sum
            }
        };
        let sum = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(sum));
        Ok(if sum.dims()[0] > elements {
            sum.narrow(0, 0, elements)
        } else {
            sum
        })
    }
}
