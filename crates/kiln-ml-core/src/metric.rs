//! The `Metric` seam: streaming, mergeable evaluation metrics.

/// A streaming metric whose state merges exactly.
///
/// State is a sum/count accumulator, so merging the states of several threads or ranks equals
/// one pass over all their inputs. `Input` is what one [`update`](Metric::update) consumes (a
/// batch of predictions and targets, usually borrowed).
///
/// Forwarding impls exist for `&mut M` and `Box<M>`; shared references cannot update.
///
/// ```
/// use kiln_ml_core::Metric;
///
/// /// The mean of all values seen.
/// #[derive(Default)]
/// struct Mean { sum: f64, count: u64 }
///
/// impl Metric<[f64]> for Mean {
///     type Value = Option<f64>;
///     type Error = std::convert::Infallible;
///     fn update(&mut self, values: &[f64]) -> Result<(), Self::Error> {
///         self.sum += values.iter().sum::<f64>();
///         self.count += values.len() as u64;
///         Ok(())
///     }
///     fn merge(&mut self, other: &Self) {
///         self.sum += other.sum;
///         self.count += other.count;
///     }
///     fn compute(&self) -> Option<f64> {
///         (self.count > 0).then(|| self.sum / self.count as f64)
///     }
///     fn reset(&mut self) {
///         *self = Self::default();
///     }
/// }
///
/// let (mut left, mut right) = (Mean::default(), Mean::default());
/// left.update(&[1.0, 2.0]).unwrap();
/// right.update(&[6.0]).unwrap();
/// left.merge(&right);
/// assert_eq!(left.compute(), Some(3.0));
/// ```
pub trait Metric<Input: ?Sized> {
    /// What [`compute`](Metric::compute) reports.
    type Value;
    /// What a rejected input reports; it should name the offending index and field.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Accumulates one input. On error the state is unchanged by that input. A metric that
    /// defers its work (kiln-ml-metrics' `DeviceTrajectoryMetrics` queues inputs on their
    /// device and reads them back in [`flush`](Self::flush)) may report here the error of an
    /// earlier input it had queued, which it then leaves out, as if that input's `update` had
    /// failed.
    fn update(&mut self, input: &Input) -> Result<(), Self::Error>;

    /// Adds another accumulator's state to this one.
    fn merge(&mut self, other: &Self)
    where
        Self: Sized;

    /// The metric's value over everything accumulated so far.
    fn compute(&self) -> Self::Value;

    /// Forgets everything accumulated.
    fn reset(&mut self);

    /// Brings in what [`update`](Metric::update) left in flight: a metric measured on a device
    /// may queue its reductions there and read them all back here, once, instead of once per
    /// input. An input found invalid only now is reported here. Call it before
    /// [`compute`](Metric::compute) at the end of a pass (kiln-ml-train's validation does);
    /// metrics that finish each input in `update` keep this default, which does nothing.
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl<Input: ?Sized, M: Metric<Input>> Metric<Input> for &mut M {
    type Value = M::Value;
    type Error = M::Error;
    fn update(&mut self, input: &Input) -> Result<(), Self::Error> {
        (**self).update(input)
    }
    fn merge(&mut self, other: &Self) {
        (**self).merge(&**other)
    }
    fn compute(&self) -> Self::Value {
        (**self).compute()
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        (**self).flush()
    }
}

impl<Input: ?Sized, M: Metric<Input>> Metric<Input> for Box<M> {
    type Value = M::Value;
    type Error = M::Error;
    fn update(&mut self, input: &Input) -> Result<(), Self::Error> {
        (**self).update(input)
    }
    fn merge(&mut self, other: &Self) {
        (**self).merge(&**other)
    }
    fn compute(&self) -> Self::Value {
        (**self).compute()
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        (**self).flush()
    }
}
