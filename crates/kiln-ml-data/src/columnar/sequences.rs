//! Batches of variable-length samples (a sequence of pulses, the nodes of a graph, the agents of
//! a scene): padded to the longest with a mask, or packed end to end with offsets and segment
//! ids, as PyTorch's padded and packed sequences and PyG's batched graphs are.
//!
//! Each sample is a run of elements of `width` floats. [`padded_list`] and [`packed_list`] read
//! them from an Arrow list column of a gathered batch (`List<Float32>`, one float per element,
//! or `List<FixedSizeList<Float32>>`, `width` floats per element); [`PaddedSequences::from_samples`]
//! and [`PackedSequences::from_samples`] take per-sample slices (the per-sample collation).

use arrow_array::{ListArray, RecordBatch};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use super::float_elements::float_elements;
use crate::{DecodeError, reject_nulls};

/// Samples padded to the longest of the batch: `values` is `[rows, longest, width]` row-major,
/// `mask` `[rows, longest]` (`true` for a real element), `lengths` each sample's element count.
#[derive(Debug, Clone, PartialEq)]
pub struct PaddedSequences {
    /// `[rows, longest, width]`, padding elements set to the pad value.
    pub values: Vec<f32>,
    /// `[rows, longest]`: `true` where an element is real.
    pub mask: Vec<bool>,
    /// Each sample's element count.
    pub lengths: Vec<usize>,
    /// The longest sample's element count (the padded length).
    pub longest: usize,
    /// Floats per element.
    pub width: usize,
}

/// Samples concatenated: `values` is `[elements, width]` row-major, sample `i` owns elements
/// `offsets[i]..offsets[i + 1]`, and `segment_ids[e]` is the sample element `e` belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedSequences {
    /// `[elements, width]`, sample after sample.
    pub values: Vec<f32>,
    /// `rows + 1` offsets into the elements, from 0 to their count.
    pub offsets: Vec<usize>,
    /// Per element, the index of its sample (PyG's `batch` vector).
    pub segment_ids: Vec<i64>,
    /// Floats per element.
    pub width: usize,
}

impl PaddedSequences {
    /// Pads `samples` (each `width × its length` floats) to the longest with `pad`.
    ///
    /// # Panics
    ///
    /// When a sample's float count is not a multiple of `width`.
    ///
    /// ```
    /// use kiln_ml_data::PaddedSequences;
    ///
    /// let padded = PaddedSequences::from_samples(&[&[1.0, 2.0][..], &[3.0]], 1, 0.0);
    /// assert_eq!(padded.values, [1.0, 2.0, 3.0, 0.0]);
    /// assert_eq!(padded.mask, [true, true, true, false]);
    /// assert_eq!(padded.padding_waste(), 1.0 / 3.0);
    /// ```
    pub fn from_samples(samples: &[&[f32]], width: usize, pad: f32) -> Self {
        let width = width.max(1);
        check_widths(samples, width);
        let lengths: Vec<usize> = samples.iter().map(|sample| sample.len() / width).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut values = vec![pad; samples.len() * longest * width];
        let mut mask = vec![false; samples.len() * longest];
        for (row, sample) in samples.iter().enumerate() {
            let length = lengths[row];
            let start = row * longest * width;
            values[start..start + length * width].copy_from_slice(&sample[..length * width]);
            mask[row * longest..row * longest + length].fill(true);
        }
        Self {
            values,
            mask,
            lengths,
            longest,
            width,
        }
    }

    /// The number of samples.
    pub fn rows(&self) -> usize {
        self.lengths.len()
    }

    /// Padding elements over real elements (0 when every sample is as long as the longest).
    pub fn padding_waste(&self) -> f64 {
        let real: usize = self.lengths.iter().sum();
        let padded = self.rows() * self.longest;
        if real == 0 {
            0.0
        } else {
            (padded - real) as f64 / real as f64
        }
    }

    /// The values as a `[rows, longest, width]` tensor and the mask as a `[rows, longest]` one,
    /// the host vectors moved into them (a batch's values are not copied twice).
    pub fn into_tensors<B: Backend>(
        self,
        device: &B::Device,
    ) -> (Tensor<B, 3>, Tensor<B, 2, Bool>) {
        let (rows, longest) = (self.rows(), self.longest);
        let values = TensorData::new(self.values, [rows, longest, self.width]);
        let mask = TensorData::new(self.mask, [rows, longest]);
        (
            Tensor::from_data(values, device),
            Tensor::from_data(mask, device),
        )
    }
}

impl PackedSequences {
    /// Concatenates `samples` (each `width × its length` floats).
    ///
    /// # Panics
    ///
    /// When a sample's float count is not a multiple of `width`.
    ///
    /// ```
    /// use kiln_ml_data::PackedSequences;
    ///
    /// let packed = PackedSequences::from_samples(&[&[1.0, 2.0][..], &[], &[3.0]], 1);
    /// assert_eq!(packed.values, [1.0, 2.0, 3.0]);
    /// assert_eq!(packed.offsets, [0, 2, 2, 3]);
    /// assert_eq!(packed.segment_ids, [0, 0, 2]);
    /// ```
    pub fn from_samples(samples: &[&[f32]], width: usize) -> Self {
        let width = width.max(1);
        check_widths(samples, width);
        let total: usize = samples.iter().map(|sample| sample.len() / width).sum();
        let mut values = Vec::with_capacity(total * width);
        let mut offsets = Vec::with_capacity(samples.len() + 1);
        let mut segment_ids = Vec::with_capacity(total);
        offsets.push(0);
        for (row, sample) in samples.iter().enumerate() {
            let length = sample.len() / width;
            values.extend_from_slice(&sample[..length * width]);
            segment_ids.extend(std::iter::repeat_n(row as i64, length));
            offsets.push(offsets[row] + length);
        }
        Self {
            values,
            offsets,
            segment_ids,
            width,
        }
    }

    /// The number of samples.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The number of elements of all samples.
    pub fn elements(&self) -> usize {
        self.segment_ids.len()
    }

    /// The values as an `[elements, width]` tensor and the segment ids as an `[elements]` one,
    /// the host vectors moved into them.
    pub fn into_tensors<B: Backend>(self, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let elements = self.elements();
        let values = TensorData::new(self.values, [elements, self.width]);
        let segments = TensorData::new(self.segment_ids, [elements]);
        (
            Tensor::from_data(values, device),
            Tensor::from_data(segments, device),
        )
    }
}

/// Panics naming the first sample whose float count is not a multiple of `width`.
fn check_widths(samples: &[&[f32]], width: usize) {
    if let Some((row, sample)) = samples
        .iter()
        .enumerate()
        .find(|(_, sample)| sample.len() % width != 0)
    {
        panic!(
            "sample {row} has {} floats, not a whole number of elements of width {width}",
            sample.len()
        );
    }
}

/// The samples of list column `column` padded to the longest with `pad` (see the module docs for
/// the list types). Fails naming the column when it is missing, of another type, or holds a null
/// (a null list, or a null value in one; an empty list is a sample of length 0).
///
/// ```
/// use std::sync::Arc;
/// use kiln_ml_data::arrow_array::{ListArray, RecordBatch, types::Float32Type};
/// use kiln_ml_data::padded_list;
///
/// let pulses = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
///     Some(vec![Some(1.0), Some(2.0)]),
///     Some(vec![Some(3.0)]),
/// ]);
/// let batch = RecordBatch::try_from_iter([("pulses", Arc::new(pulses) as _)]).unwrap();
/// let padded = padded_list(&batch, "pulses", 0.0).unwrap();
/// assert_eq!((padded.longest, padded.lengths.clone()), (2, vec![2, 1]));
/// ```
pub fn padded_list(
    batch: &RecordBatch,
    column: &str,
    pad: f32,
) -> Result<PaddedSequences, DecodeError> {
    let (samples, width) = list_samples(batch, column)?;
    Ok(PaddedSequences::from_samples(&samples, width, pad))
}

/// The samples of list column `column` concatenated, with offsets and segment ids (see
/// [`padded_list`] for the types and errors).
pub fn packed_list(batch: &RecordBatch, column: &str) -> Result<PackedSequences, DecodeError> {
    let (samples, width) = list_samples(batch, column)?;
    Ok(PackedSequences::from_samples(&samples, width))
}

/// Each row's elements of list column `column` as a slice of floats, and the floats per element.
fn list_samples<'a>(
    batch: &'a RecordBatch,
    column: &str,
) -> Result<(Vec<&'a [f32]>, usize), DecodeError> {
    let list = crate::column::<ListArray>(batch, column)?;
    reject_nulls(list, column)?;
    // A sliced list keeps its whole child: only the elements its rows own are read and checked.
    let offsets = list.offsets();
    let (first, last) = (offsets[0] as usize, offsets[offsets.len() - 1] as usize);
    let (values, width) =
        float_elements(list.values().as_ref(), first..last, column).map_err(|error| {
            // The error names the element's index among the rows' elements: the row owning
            // it is the last whose first element is at or before it.
            match error.row() {
                Some(element) => {
                    let element = first + element as usize;
                    let row = offsets[1..].partition_point(|&end| end as usize <= element);
                    error.at_row(row as u64)
                }
                None => error,
            }
        })?;
    let samples = offsets
        .windows(2)
        .map(|bounds| {
            &values[(bounds[0] as usize - first) * width..(bounds[1] as usize - first) * width]
        })
        .collect();
    Ok((samples, width))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder};
    use arrow_array::types::Float32Type;
    use burn::backend::Flex;

    use super::*;

    /// Pulses of 2 floats each: rows of 2, 0 and 3 pulses.
    fn pulses() -> RecordBatch {
        let mut builder = ListBuilder::new(FixedSizeListBuilder::new(Float32Builder::new(), 2));
        for (row, count) in [2, 0, 3].into_iter().enumerate() {
            for pulse in 0..count {
                let elements = builder.values();
                elements
                    .values()
                    .append_value(row as f32 * 10.0 + pulse as f32);
                elements.values().append_value(-(pulse as f32));
                elements.append(true);
            }
            builder.append(true);
        }
        RecordBatch::try_from_iter([("pulses", Arc::new(builder.finish()) as _)]).unwrap()
    }

    #[test]
    fn elements_of_several_floats_pad_and_pack() {
        let batch = pulses();
        let padded = padded_list(&batch, "pulses", f32::NAN).unwrap();
        assert_eq!((padded.longest, padded.width), (3, 2));
        assert_eq!(padded.lengths, [2, 0, 3]);
        assert_eq!(&padded.values[..4], &[0.0, 0.0, 1.0, -1.0]);
        assert!(
            padded.values[4..12].iter().all(|value| value.is_nan()),
            "padding"
        );
        assert_eq!(&padded.values[12..], &[20.0, 0.0, 21.0, -1.0, 22.0, -2.0]);
        assert_eq!(
            padded.mask,
            [true, true, false, false, false, false, true, true, true]
        );
        assert_eq!(padded.padding_waste(), 4.0 / 5.0);

        let packed = packed_list(&batch, "pulses").unwrap();
        assert_eq!(packed.offsets, [0, 2, 2, 5]);
        assert_eq!(packed.segment_ids, [0, 0, 2, 2, 2]);
        assert_eq!(packed.values[4..6], [20.0, 0.0]);

        // A slice of the batch keeps its rows' elements.
        let sliced = packed_list(&batch.slice(1, 2), "pulses").unwrap();
        assert_eq!(sliced.offsets, [0, 0, 3]);
        assert_eq!(sliced.values, [20.0, 0.0, 21.0, -1.0, 22.0, -2.0]);
    }

    #[test]
    fn the_tensors_have_the_batch_shapes() {
        tensors_on::<Flex>(&Default::default());
    }

    /// The GPU-style tier: the same tensors through Burn's wgpu backend (lavapipe in CI).
    #[cfg(feature = "wgpu")]
    #[test]
    fn the_tensors_have_the_batch_shapes_on_wgpu() {
        if let Some(device) = kiln_ml_testkit::wgpu_device() {
            tensors_on::<burn::backend::Wgpu>(&device);
        }
    }

    /// The padded and packed tensors of `pulses()` on `device`: shapes, mask, values, segments.
    fn tensors_on<B: Backend>(device: &B::Device) {
        let padded = padded_list(&pulses(), "pulses", 0.0).unwrap();
        let (values, mask) = padded.clone().into_tensors::<B>(device);
        assert_eq!(values.dims(), [3, 3, 2]);
        assert_eq!(mask.dims(), [3, 3]);
        let real: Vec<i64> = mask.int().sum().into_data().iter::<i64>().collect();
        assert_eq!(real, [5], "one true per real element");
        let read: Vec<f32> = values.into_data().iter::<f32>().collect();
        assert_eq!(read, padded.values);
        let packed = packed_list(&pulses(), "pulses").unwrap();
        let (values, segments) = packed.into_tensors::<B>(device);
        assert_eq!(values.dims(), [5, 2]);
        let segments: Vec<i64> = segments.into_data().iter::<i64>().collect();
        assert_eq!(segments, [0, 0, 2, 2, 2]);
    }

    #[test]
    fn wrong_columns_and_nulls_are_named() {
        let floats =
            ListArray::from_iter_primitive::<Float32Type, _, _>(vec![Some(vec![Some(1.0)]), None]);
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as _),
            ("hits", Arc::new(floats) as _),
        ])
        .unwrap();
        let error = padded_list(&batch, "hits", 0.0).unwrap_err();
        assert_eq!((error.column(), error.row()), (Some("hits"), Some(1)));
        let error = packed_list(&batch, "id").unwrap_err();
        assert_eq!(error.column(), Some("id"));
        assert!(packed_list(&batch, "nope").unwrap_err().column() == Some("nope"));
        // A null value inside a list names the row owning it (past an empty row).
        let with_null_value = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(1.0)]),
            Some(vec![]),
            Some(vec![Some(2.0), None]),
        ]);
        let batch = RecordBatch::try_from_iter([("hits", Arc::new(with_null_value) as _)]).unwrap();
        let error = padded_list(&batch, "hits", 0.0).unwrap_err();
        assert!(error.to_string().contains("null"), "{error}");
        assert_eq!((error.column(), error.row()), (Some("hits"), Some(2)));
        // The same in a slice: rows count from the slice's first.
        let error = packed_list(&batch.slice(1, 2), "hits").unwrap_err();
        assert_eq!(error.row(), Some(1));
    }

    #[test]
    fn a_null_outside_a_sliced_batch_does_not_count() {
        let hits = ListArray::from_iter_primitive::<Float32Type, _, _>(vec![
            Some(vec![Some(1.0), None]),
            Some(vec![Some(2.0), Some(3.0)]),
        ]);
        let batch = RecordBatch::try_from_iter([("hits", Arc::new(hits) as _)]).unwrap();
        assert!(packed_list(&batch, "hits").is_err());
        let packed = packed_list(&batch.slice(1, 1), "hits").unwrap();
        assert_eq!(packed.values, [2.0, 3.0]);
        assert_eq!(packed.offsets, [0, 2]);
    }

    #[test]
    #[should_panic(expected = "sample 1 has 3 floats")]
    fn a_partial_element_is_refused() {
        let _ = PackedSequences::from_samples(&[&[1.0, 2.0][..], &[1.0, 2.0, 3.0]], 2);
    }
}
