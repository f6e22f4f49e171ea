//! The seam through which the data side reports the resume position: an iterator of batches
//! that also says the [`Position`] after each one, and [`PlainBatches`], which makes any
//! iterator one.

use std::fmt;

use crate::{Error, Fingerprint, Position, Result, ResumePoint};

/// An epoch's batches that say where the data stands after each one.
///
/// The data side owns the position: it alone knows the plan, the shard and the batch
/// boundaries, so a trainer saves what this reports instead of counting samples itself.
/// kiln-ml-data's `Epoch` implements it; [`PlainBatches`] adapts any other iterator.
pub trait PositionedBatches: Iterator {
    /// The position after the batches returned so far: where the epoch was opened before the
    /// first, and the start of the next epoch once the epoch is known to be over. kiln-ml-data's
    /// `Epoch` knows with its last batch; [`PlainBatches`] once `next` returned `None` (it
    /// cannot look ahead), so a trainer stopping on that last batch learns that no batch is
    /// left from `size_hint` instead.
    fn position(&self) -> Position;

    /// Samples in the batch [`next`](Iterator::next) returned last, on this rank (for
    /// throughput figures); 0 before the first.
    fn last_batch_samples(&self) -> u64;

    /// The identity of the stream the positions count in ([`data_key`](crate::data_key)), saved
    /// with them so a resume onto other data is refused. The default, `None`, skips that check.
    fn data_key(&self) -> Option<Fingerprint> {
        None
    }

    /// The position and the data key together: what to save to resume.
    fn resume_point(&self) -> ResumePoint {
        ResumePoint {
            position: self.position(),
            data_key: self.data_key(),
        }
    }
}

impl<I: PositionedBatches + ?Sized> PositionedBatches for Box<I> {
    fn position(&self) -> Position {
        (**self).position()
    }

    fn last_batch_samples(&self) -> u64 {
        (**self).last_batch_samples()
    }

    fn data_key(&self) -> Option<Fingerprint> {
        (**self).data_key()
    }
}

/// A plain iterator of one epoch's batches made a [`PositionedBatches`]: it counts each
/// batch's samples with a function, and resumes by skipping whole batches.
///
/// The iterator must yield the same batches every time it is built for an epoch (a
/// deterministic order), as any resumable data must. Items come out as `Ok`; a resume
/// position inside a batch is an `Err` before any batch.
///
/// ```
/// use kiln_ml_core::{PlainBatches, Position, PositionedBatches};
///
/// let epoch = || vec![vec![1, 2], vec![3, 4], vec![5]];
/// let mut batches = PlainBatches::new(epoch(), Position::start_of(0), Vec::len)?;
/// assert_eq!(batches.next().unwrap()?, [1, 2]);
/// let saved = batches.position();
/// assert_eq!(saved, Position { epoch: 0, consumed: 2 });
///
/// // Later, from a checkpoint: the same epoch, resumed after its first batch.
/// let resumed: Vec<_> = PlainBatches::new(epoch(), saved, Vec::len)?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(resumed, [vec![3, 4], vec![5]]);
/// # Ok::<(), kiln_ml_core::Error>(())
/// ```
pub struct PlainBatches<I, F> {
    batches: I,
    samples_of: F,
    position: Position,
    last_batch_samples: u64,
    exhausted: bool,
    data_key: Option<Fingerprint>,
}

impl<I, F> PlainBatches<I, F>
where
    I: Iterator,
    F: FnMut(&I::Item) -> usize,
{
    /// Epoch `from.epoch`'s `batches`, from its start, positioned at `from`: the batches
    /// before `from.consumed` samples are skipped. `samples_of` counts a batch's samples.
    ///
    /// Fails when `from.consumed` falls inside a batch or beyond the last one.
    pub fn new(
        batches: impl IntoIterator<IntoIter = I>,
        from: Position,
        mut samples_of: F,
    ) -> Result<Self> {
        let mut batches = batches.into_iter();
        let mut skipped = 0u64;
        let mut index = 0u64;
        while skipped < from.consumed {
            let Some(batch) = batches.next() else {
                return Err(Error::InvalidPosition {
                    position: from,
                    plan_epoch: from.epoch,
                    reason: format!("the epoch has only {skipped} samples in {index} batches"),
                });
            };
            let samples = samples_of(&batch) as u64;
            if skipped + samples > from.consumed {
                return Err(Error::InvalidPosition {
                    position: from,
                    plan_epoch: from.epoch,
                    reason: format!(
                        "it falls inside batch {index} (samples {skipped}..{}): resume only at \
                         batch boundaries",
                        skipped + samples
                    ),
                });
            }
            skipped += samples;
            index += 1;
        }
        Ok(Self {
            batches,
            samples_of,
            position: from,
            last_batch_samples: 0,
            exhausted: false,
            data_key: None,
        })
    }

    /// Reports `key` as the stream's [`data_key`](crate::data_key) (for example, a fingerprint
    /// of the files and the seed the batches come from), so a resume onto other data is refused.
    pub fn with_data_key(mut self, key: Fingerprint) -> Self {
        self.data_key = Some(key);
        self
    }
}

impl<I, F> Iterator for PlainBatches<I, F>
where
    I: Iterator,
    F: FnMut(&I::Item) -> usize,
{
    type Item = Result<I::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.exhausted {
            return None;
        }
        let Some(batch) = self.batches.next() else {
            self.exhausted = true;
            self.position = Position::start_of(self.position.epoch + 1);
            return None;
        };
        self.last_batch_samples = (self.samples_of)(&batch) as u64;
        self.position.consumed += self.last_batch_samples;
        Some(Ok(batch))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.batches.size_hint()
    }
}

impl<I, F> PositionedBatches for PlainBatches<I, F>
where
    I: Iterator,
    F: FnMut(&I::Item) -> usize,
{
    fn position(&self) -> Position {
        self.position
    }

    fn last_batch_samples(&self) -> u64 {
        self.last_batch_samples
    }

    fn data_key(&self) -> Option<Fingerprint> {
        self.data_key
    }
}

impl<I, F> fmt::Debug for PlainBatches<I, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainBatches")
            .field("position", &self.position)
            .field("last_batch_samples", &self.last_batch_samples)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch() -> Vec<Vec<u32>> {
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
    }

    #[test]
    fn plain_batches_report_positions_and_end_at_the_next_epoch() {
        let mut batches = PlainBatches::new(epoch(), Position::start_of(3), Vec::len).unwrap();
        assert_eq!(batches.position(), Position::start_of(3));
        assert_eq!(batches.last_batch_samples(), 0);
        let mut seen = Vec::new();
        while let Some(batch) = batches.next() {
            seen.push((batch.unwrap().len(), batches.position().consumed));
        }
        assert_eq!(seen, [(3, 3), (3, 6), (2, 8)]);
        assert_eq!(batches.last_batch_samples(), 2);
        assert_eq!(batches.position(), Position::start_of(4));
        assert!(batches.next().is_none());
    }

    #[test]
    fn plain_batches_resume_after_whole_batches() {
        for (consumed, first) in [(0, 0), (3, 3), (6, 6)] {
            let from = Position { epoch: 1, consumed };
            let mut batches = PlainBatches::new(epoch(), from, Vec::len).unwrap();
            assert_eq!(batches.position(), from);
            assert_eq!(batches.next().unwrap().unwrap()[0], first);
        }
        let at_end = Position {
            epoch: 1,
            consumed: 8,
        };
        let mut batches = PlainBatches::new(epoch(), at_end, Vec::len).unwrap();
        assert!(batches.next().is_none());
        assert_eq!(batches.position(), Position::start_of(2));
    }

    #[test]
    fn plain_batches_refuse_positions_inside_or_past_the_epoch() {
        let inside = PlainBatches::new(
            epoch(),
            Position {
                epoch: 0,
                consumed: 4,
            },
            Vec::len,
        )
        .unwrap_err()
        .to_string();
        assert!(inside.contains("inside batch 1 (samples 3..6)"), "{inside}");
        let past = PlainBatches::new(
            epoch(),
            Position {
                epoch: 0,
                consumed: 9,
            },
            Vec::len,
        )
        .unwrap_err()
        .to_string();
        assert!(past.contains("only 8 samples in 3 batches"), "{past}");
    }
}
