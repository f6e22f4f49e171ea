//! Where each trainable parameter lives in the fused optimizers' flat buckets.
//!
//! Parameters are grouped in order into buckets (at most [`BUCKET_ELEMENTS`] each, as the
//! data-parallel all-reduce groups them) and each starts at a multiple of [`ALIGN`] elements.
//! Burn's GPU backends slice a tensor without a copy when the slice starts and ends on the
//! device's memory alignment (256 bytes at most on the GPUs kiln targets), so the parameters a
//! fused step hands back to the module are views of its buckets: no kernel splits them. The
//! padding between them is zero in every bucket (parameters, gradients, moments), so it adds
//! nothing to a norm and an update leaves it zero.

use std::ops::Range;

use burn::module::ParamId;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::buckets::{BUCKET_ELEMENTS, bucket_ranges, concat};

/// Elements of f32 in 256 bytes: every parameter starts on a multiple of this.
pub(crate) const ALIGN: usize = 64;

/// The places of a module's trainable parameters in flat, padded buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The parameters, in visiting order.
    pub(crate) ids: Vec<ParamId>,
    /// Their element counts.
    pub(crate) sizes: Vec<usize>,
    /// For each bucket, the range of parameter indices it holds.
    pub(crate) ranges: Vec<Range<usize>>,
    /// For each parameter, its first element in its bucket.
    pub(crate) offsets: Vec<usize>,
    /// Each bucket's length, padding included.
    pub(crate) lengths: Vec<usize>,
}

impl Layout {
    /// The layout of parameters `ids` of `sizes` elements, in that order.
    pub(crate) fn new(ids: Vec<ParamId>, sizes: Vec<usize>) -> Self {
        debug_assert!(BUCKET_ELEMENTS.is_multiple_of(ALIGN));
        let ranges = bucket_ranges(&sizes);
        let mut offsets = vec![0; sizes.len()];
        let mut lengths = Vec::with_capacity(ranges.len());
        for range in &ranges {
            let mut end = 0;
            for index in range.clone() {
                offsets[index] = end;
                end = (end + sizes[index]).next_multiple_of(ALIGN);
            }
            lengths.push(end.max(ALIGN));
        }
        Self {
            ids,
            sizes,
            ranges,
            offsets,
            lengths,
        }
    }

    /// The elements of parameter `index` in its bucket.
    fn span(&self, index: usize) -> Range<usize> {
        self.offsets[index]..self.offsets[index] + self.sizes[index]
    }

    /// `pieces` (one flat tensor per parameter, in order; `None` for zeros) laid out in
    /// zero-padded buckets: a zero fill and a copy per given piece.
    pub(crate) fn pad<B: Backend>(
        &self,
        pieces: Vec<Option<Tensor<B, 1>>>,
        device: &B::Device,
    ) -> Vec<Tensor<B, 1>> {
        debug_assert_eq!(pieces.len(), self.sizes.len());
        let mut pieces = pieces.into_iter();
        self.ranges
            .iter()
            .zip(&self.lengths)
            .map(|(range, &length)| {
                let mut bucket = Tensor::zeros([length], device);
                for (index, piece) in range.clone().zip(pieces.by_ref()) {
                    if let Some(piece) = piece {
                        bucket = bucket.slice_assign([self.span(index)], piece);
                    }
                }
                bucket
            })
            .collect()
    }

    /// Each parameter's elements in `buckets`, in order: views, without a copy where the
    /// backend slices in place.
    pub(crate) fn pieces<B: Backend>(&self, buckets: &[Tensor<B, 1>]) -> Vec<Tensor<B, 1>> {
        self.ranges
            .iter()
            .zip(buckets)
            .flat_map(|(range, bucket)| {
                range
                    .clone()
                    .map(move |index| bucket.clone().slice([self.span(index)]))
            })
            .collect()
    }

    /// `buckets` without their padding: one tensor per bucket of the parameters' elements end
    /// to end (how the fused optimizers' records keep their state).
    pub(crate) fn unpad<B: Backend>(&self, buckets: &[Tensor<B, 1>]) -> Vec<Tensor<B, 1>> {
        let mut pieces = self.pieces(buckets).into_iter();
        self.ranges
            .iter()
            .map(|range| concat(pieces.by_ref().take(range.len()).collect()))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type B = Flex;

    /// A flat f32 tensor on flex (shared with the fused step's tests).
    pub(crate) fn tensor(values: Vec<f32>) -> Tensor<B, 1> {
        Tensor::from_data(TensorData::from(values.as_slice()), &Default::default())
    }

    /// A flat tensor's values.
    pub(crate) fn values(tensor: Tensor<B, 1>) -> Vec<f32> {
        tensor.into_data().to_vec().unwrap()
    }

    #[test]
    fn parameters_start_aligned_and_padding_is_zero() {
        let ids = (0..3).map(|_| ParamId::new()).collect();
        let layout = Layout::new(ids, vec![3, ALIGN + 1, 1]);
        assert_eq!(layout.ranges, vec![0..3]);
        assert_eq!(layout.offsets, vec![0, ALIGN, 3 * ALIGN]);
        assert_eq!(layout.lengths, vec![4 * ALIGN]);

        let first = tensor(vec![1.0, 2.0, 3.0]);
        let third = tensor(vec![9.0]);
        let buckets = layout.pad(vec![Some(first), None, Some(third)], &Default::default());
        let flat = values(buckets[0].clone());
        assert_eq!(flat.len(), 4 * ALIGN);
        assert_eq!(&flat[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert_eq!(flat[3 * ALIGN], 9.0);
        assert_eq!(flat.iter().sum::<f32>(), 15.0, "zeros elsewhere");

        let pieces = layout.pieces(&buckets);
        assert_eq!(values(pieces[0].clone()), [1.0, 2.0, 3.0]);
        assert_eq!(values(pieces[1].clone()), vec![0.0; ALIGN + 1]);
        assert_eq!(values(pieces[2].clone()), [9.0]);

        let unpadded = layout.unpad(&buckets);
        assert_eq!(values(unpadded[0].clone()).len(), ALIGN + 5);
    }

    #[test]
    fn large_parameters_get_buckets_of_their_own() {
        let ids = (0..3).map(|_| ParamId::new()).collect();
        let layout = Layout::new(ids, vec![2, BUCKET_ELEMENTS, 5]);
        assert_eq!(layout.ranges, vec![0..1, 1..2, 2..3]);
        assert_eq!(layout.offsets, vec![0, 0, 0]);
        assert_eq!(layout.lengths, vec![ALIGN, BUCKET_ELEMENTS, ALIGN]);
    }
}
