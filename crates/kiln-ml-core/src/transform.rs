//! The `Transform` seam: preprocessing with a stable fingerprint.

use std::fmt;
use std::sync::Arc;

use crate::Fingerprint;

/// Turns a raw sample into a preprocessed one.
///
/// The [`fingerprint`](Transform::fingerprint) must change whenever the output could change
/// (name, version, parameters), because caches of transformed samples are keyed by it: a stale
/// fingerprint serves stale data.
///
/// ```
/// use kiln_ml_core::{transform_fn, Transform};
///
/// let scale = transform_fn("scale", 1, |x: f32| Ok::<_, std::convert::Infallible>(x * 2.0));
/// assert_eq!(scale.apply(1.5).unwrap(), 3.0);
/// let scale_v2 = transform_fn("scale", 2, |x: f32| Ok::<_, std::convert::Infallible>(x * 3.0));
/// assert_ne!(scale.fingerprint(), scale_v2.fingerprint());
/// ```
pub trait Transform<In>: Send + Sync {
    /// The preprocessed sample.
    type Output: Send;
    /// What a failed transform reports.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Transforms one sample.
    fn apply(&self, input: In) -> Result<Self::Output, Self::Error>;

    /// Identifies the transform's behaviour: name, version and parameters.
    fn fingerprint(&self) -> Fingerprint;
}

impl<In, T: Transform<In> + ?Sized> Transform<In> for &T {
    type Output = T::Output;
    type Error = T::Error;
    fn apply(&self, input: In) -> Result<Self::Output, Self::Error> {
        (**self).apply(input)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

impl<In, T: Transform<In> + ?Sized> Transform<In> for Box<T> {
    type Output = T::Output;
    type Error = T::Error;
    fn apply(&self, input: In) -> Result<Self::Output, Self::Error> {
        (**self).apply(input)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

impl<In, T: Transform<In> + ?Sized> Transform<In> for Arc<T> {
    type Output = T::Output;
    type Error = T::Error;
    fn apply(&self, input: In) -> Result<Self::Output, Self::Error> {
        (**self).apply(input)
    }
    fn fingerprint(&self) -> Fingerprint {
        (**self).fingerprint()
    }
}

/// A [`Transform`] made from a closure; see [`transform_fn`].
#[derive(Clone)]
pub struct FnTransform<F> {
    fingerprint: Fingerprint,
    function: F,
}

impl<F> fmt::Debug for FnTransform<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTransform")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl<F> FnTransform<F> {
    /// A closure transform with an explicit fingerprint (include every parameter in it).
    pub fn new(fingerprint: Fingerprint, function: F) -> Self {
        Self {
            fingerprint,
            function,
        }
    }
}

/// A closure transform fingerprinted by its name and version: bump the version whenever the
/// closure's behaviour changes.
pub fn transform_fn<F>(name: &str, version: u64, function: F) -> FnTransform<F> {
    let fingerprint = Fingerprint::builder().str(name).u64(version).finish();
    FnTransform::new(fingerprint, function)
}

impl<In, Out, E, F> Transform<In> for FnTransform<F>
where
    F: Fn(In) -> Result<Out, E> + Send + Sync,
    Out: Send,
    E: std::error::Error + Send + Sync + 'static,
{
    type Output = Out;
    type Error = E;
    fn apply(&self, input: In) -> Result<Out, E> {
        (self.function)(input)
    }
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
}
