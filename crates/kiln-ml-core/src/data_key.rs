//! What a resume position is a position *in*: the dataset, the seed and the sampler settings.

use crate::{Fingerprint, Position};

/// The identity of an epoch's data stream: a fingerprint of the layout (its files, their
/// identities and block sizes), the run's seed and the sampler's settings as they shape the
/// global stream (when the sampler reports them,
/// [`Sampler::stream_fingerprint`](crate::Sampler::stream_fingerprint): the global batch, not the
/// per-rank one, so a position resumes on another world size with the same global batch).
///
/// A [`Position`] counts samples of one stream; the same count in another stream (a file
/// added, another seed, another batch size) points somewhere else. Saving this key beside the
/// position lets a resume refuse such a mismatch instead of silently repeating or skipping
/// samples. The epoch and the shard are not part of it: a run moves through epochs and may
/// resume on another world size.
///
/// ```
/// use kiln_ml_core::{Fingerprint, data_key};
///
/// let layout = Fingerprint::of_bytes(b"files");
/// let settings = Some(Fingerprint::of_bytes(b"batch 64"));
/// assert_eq!(data_key(layout, 7, settings), data_key(layout, 7, settings));
/// assert_ne!(data_key(layout, 7, settings), data_key(layout, 8, settings));
/// assert_ne!(data_key(layout, 7, settings), data_key(layout, 7, None));
/// ```
pub fn data_key(layout: Fingerprint, seed: u64, settings: Option<Fingerprint>) -> Fingerprint {
    Fingerprint::builder()
        .str("kiln data key")
        .u64(1)
        .fingerprint(layout)
        .u64(seed)
        .optional_fingerprint(settings)
        .finish()
}

/// A resume position together with the [`data_key`] of the stream it counts in: what to save
/// to resume data loading exactly and safely.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct ResumePoint {
    /// Where the stream stands.
    pub position: Position,
    /// The stream's identity; `None` when its source could not say (a plain iterator), which
    /// skips the check.
    #[serde(default)]
    pub data_key: Option<Fingerprint>,
}
