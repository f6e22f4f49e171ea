//! Gradients and weights across data-parallel replicas, through burn-collective.
//!
//! Every float parameter that takes a gradient is flattened, in the module's visiting order
//! (the same on every replica of the same model, whatever its parameter ids), into a few large
//! buckets, as PyTorch's DDP does: one collective call per bucket instead of one per tensor. A
//! replica with no gradient for a parameter (an empty window, an unused branch) contributes
//! zeros, so every replica sends the same shapes in the same order.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use crate::buckets::{ReplaceParams, buckets, split};
use crate::collective::Collective;

/// A window's gradients and statistics after the all-reduce: sums over every replica.
pub(crate) struct ReducedWindow<B: AutodiffBackend> {
    /// Gradient sums, one per parameter that takes a gradient.
    pub(crate) grads: GradientsParams,
    /// The sum of the replicas' loss sums.
    pub(crate) loss_sum: Tensor<B::InnerBackend, 1>,
    /// `[micro-batches, items]`, summed over the replicas.
    pub(crate) counts: Tensor<B::InnerBackend, 1>,
}

/// Sums a window over every replica with one all-reduce per bucket: the gradients (zeros where
/// this replica has none), the loss sum and the `[micro_batches, items]` counts.
pub(crate) fn all_reduce_window<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    collective: &Collective,
    grads: Option<GradientsParams>,
    loss_sum: Option<Tensor<B::InnerBackend, 1>>,
    counts: [u64; 2],
    device: &B::Device,
) -> Result<ReducedWindow<B>, String> {
    let mut grads = grads.unwrap_or_default();
    let mut flatten = FlattenGrads::<B> {
        grads: &mut grads,
        device,
        pieces: Vec::new(),
    };
    module.visit(&mut flatten);
    let mut pieces = flatten.pieces;
    let loss_sum = loss_sum.unwrap_or_else(|| Tensor::zeros([1], device));
    let counts = Tensor::from_data(
        TensorData::new(vec![counts[0] as f32, counts[1] as f32], [2]),
        device,
    );
    let grad_pieces = pieces.len();
    pieces.push(loss_sum);
    pieces.push(counts);

    let mut reduced = Vec::with_capacity(pieces.len());
    for bucket in buckets(pieces) {
        let sizes: Vec<usize> = bucket.iter().map(|piece| piece.dims()[0]).collect();
        let sum = collective.sum(bucket)?;
        reduced.extend(split(sum, &sizes));
    }
    let counts = reduced.pop().expect("the counts were pushed last");
    let loss_sum = reduced
        .pop()
        .expect("the loss sum was pushed before the counts");
    debug_assert_eq!(reduced.len(), grad_pieces);
    let mut unflatten = UnflattenGrads::<B> {
        grads: GradientsParams::new(),
        pieces: reduced.into_iter(),
    };
    module.visit(&mut unflatten);
    Ok(ReducedWindow {
        grads: unflatten.grads,
        loss_sum,
        counts,
    })
}

/// The sums over every replica of a few counts, read back to the host (one readback).
pub(crate) fn all_reduce_counts<B: Backend, const N: usize>(
    collective: &Collective,
    counts: [u64; N],
    device: &B::Device,
) -> Result<[f64; N], String> {
    let values = counts.iter().map(|&count| count as f32).collect();
    let local = Tensor::<B, 1>::from_data(TensorData::new(values, [N]), device);
    let sums: Vec<f64> = collective
        .sum(vec![local])?
        .into_data()
        .iter::<f64>()
        .collect();
    sums.try_into()
        .map_err(|sums: Vec<f64>| format!("the device returned {} values for {N}", sums.len()))
}

/// Gives every replica the root replica's float parameters: an all-reduce (sum) to which the
/// root sends its weights and the others negative zeros, exact in floating point (x + (−0) = x
/// for every x, −0 included, where +0 would turn a −0 weight into +0), and the one collective
/// burn-collective 0.21 runs across nodes (its global broadcast is unimplemented). Every
/// replica, the root included, takes the sum it received, so all hold the same bits even where
/// a reduction would start from +0. Returns the module with the root's weights.
pub(crate) fn broadcast_params<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: M,
    collective: &Collective,
    is_root: bool,
) -> Result<M, String> {
    let mut flatten = FlattenParams::<B> { pieces: Vec::new() };
    module.visit(&mut flatten);
    let mut received = Vec::with_capacity(flatten.pieces.len());
    for bucket in buckets(flatten.pieces) {
        let sizes: Vec<usize> = bucket.iter().map(|piece| piece.dims()[0]).collect();
        let sent = if is_root {
            bucket
        } else {
            bucket
                .iter()
                .map(|piece| Tensor::full(piece.shape(), -0.0, &piece.device()))
                .collect()
        };
        let value = collective.sum(sent)?;
        received.extend(split(value, &sizes));
    }
    let mut replace = ReplaceParams::<B> {
        pieces: received.into_iter(),
        trainable_only: false,
    };
    Ok(module.map(&mut replace))
}

struct FlattenGrads<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    device: &'a B::Device,
    pieces: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for FlattenGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        // One look at the value: whether it trains (and so takes part) and its size.
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let elements = value.shape().num_elements();
        let grad = match self.grads.remove::<B::InnerBackend, D>(param.id) {
            Some(grad) => grad.reshape([elements]),
            None => Tensor::zeros([elements], self.device),
        };
        self.pieces.push(grad);
    }
}

struct UnflattenGrads<B: AutodiffBackend> {
    grads: GradientsParams,
    pieces: std::vec::IntoIter<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for UnflattenGrads<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let piece = self
            .pieces
            .next()
            .expect("one reduced piece per parameter that trains, in the same order");
        let dims: [usize; D] = value.dims();
        self.grads
            .register::<B::InnerBackend, D>(param.id, piece.reshape(dims));
    }
}

struct FlattenParams<B: AutodiffBackend> {
    pieces: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for FlattenParams<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val().inner();
        let elements = value.shape().num_elements();
        self.pieces.push(value.reshape([elements]));
    }
}
