//! Flat buckets of parameters or gradients: the unit the data-parallel all-reduce sends and the
//! fused optimizer updates, so a step makes a few large calls instead of one per tensor.

use std::ops::Range;

use burn::module::{ModuleMapper, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

/// Elements per bucket (128 MiB of f32): large enough that a step makes few calls, small enough
/// that a bucket's extra copy stays modest.
pub(crate) const BUCKET_ELEMENTS: usize = 1 << 25;

/// Groups pieces of `sizes` elements, in order, into buckets of at most [`BUCKET_ELEMENTS`] (a
/// larger piece gets a bucket of its own): the ranges of piece indices, one per bucket.
pub(crate) fn bucket_ranges(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let mut filled = usize::MAX;
    for (index, &size) in sizes.iter().enumerate() {
        match ranges.last_mut() {
            Some(range) if filled.saturating_add(size) <= BUCKET_ELEMENTS => {
                range.end = index + 1;
                filled += size;
            }
            _ => {
                ranges.push(index..index + 1);
                filled = size;
            }
        }
    }
    ranges
}

/// Groups 1-D pieces, in order, into buckets (see [`bucket_ranges`]).
pub(crate) fn buckets<B: Backend>(pieces: Vec<Tensor<B, 1>>) -> Vec<Vec<Tensor<B, 1>>> {
    let sizes: Vec<usize> = pieces.iter().map(|piece| piece.dims()[0]).collect();
    let mut pieces = pieces.into_iter();
    bucket_ranges(&sizes)
        .into_iter()
        .map(|range| pieces.by_ref().take(range.len()).collect())
        .collect()
}

/// One tensor of `pieces`, concatenated (a single piece as it is).
pub(crate) fn concat<B: Backend>(mut pieces: Vec<Tensor<B, 1>>) -> Tensor<B, 1> {
    if pieces.len() == 1 {
        pieces.pop().expect("one piece")
    } else {
        Tensor::cat(pieces, 0)
    }
}

/// `bucket` cut back into pieces of `sizes` elements.
pub(crate) fn split<B: Backend>(bucket: Tensor<B, 1>, sizes: &[usize]) -> Vec<Tensor<B, 1>> {
    if sizes.len() == 1 {
        vec![bucket]
    } else {
        bucket.split_with_sizes(sizes.to_vec(), 0)
    }
}

/// Puts `pieces`, in visiting order, back into a module's float parameters, each reshaped to its
/// parameter's shape and keeping whether it trains. With `trainable_only`, parameters that do
/// not train are left as they are and take no piece (an optimizer's update); without, every
/// float parameter takes one (a broadcast of the weights).
pub(crate) struct ReplaceParams<B: AutodiffBackend> {
    pub(crate) pieces: std::vec::IntoIter<Tensor<B::InnerBackend, 1>>,
    pub(crate) trainable_only: bool,
}

impl<B: AutodiffBackend> ModuleMapper<B> for ReplaceParams<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|tensor| {
            let trains = tensor.is_require_grad();
            if self.trainable_only && !trains {
                return tensor;
            }
            let piece = self
                .pieces
                .next()
                .expect("one piece per replaced parameter, in visiting order");
            let dims: [usize; D] = tensor.dims();
            let value = Tensor::from_inner(piece.reshape(dims));
            if trains { value.require_grad() } else { value }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pieces_share_a_bucket_and_large_ones_get_their_own() {
        assert_eq!(bucket_ranges(&[]), Vec::<Range<usize>>::new());
        assert_eq!(bucket_ranges(&[3, 4, 5]), vec![0..3]);
        let half = BUCKET_ELEMENTS / 2;
        assert_eq!(
            bucket_ranges(&[half, half, 1, BUCKET_ELEMENTS + 1, 2]),
            vec![0..2, 2..3, 3..4, 4..5]
        );
    }
}
