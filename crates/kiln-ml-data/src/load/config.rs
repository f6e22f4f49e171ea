//! Loader settings.

use crate::{Error, Result};

/// The default of [`LoaderConfig::prefetch_bytes`]: 64 MiB.
pub(crate) const DEFAULT_PREFETCH_BYTES: u64 = 64 << 20;

/// For settings saved before `prefetch_bytes` existed.
fn default_prefetch_bytes() -> u64 {
    DEFAULT_PREFETCH_BYTES
}

/// How a [`Loader`](crate::Loader) runs: worker threads, prefetch depth and the last batch.
///
/// The defaults are the fast path: a worker per core (up to 8) and a prefetch window the loader
/// sizes from the bytes of a batch.
///
/// None of these change which samples come out or in which order; only `drop_last` changes
/// whether the last, short batch comes out at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoaderConfig {
    /// Persistent worker threads that read blocks and collate batches (default: the available
    /// parallelism, at most 8).
    pub workers: usize,
    /// Batches assembled ahead of the consumer; `None` (the default): as many as
    /// `prefetch_bytes` holds, from the block sizes the source reports, between 2 and 256 (16
    /// where the source does not report them). Small batches need a deep window, or the
    /// workers' wake-ups, one per batch, cost more than the batches (see `prefetch_depth`).
    #[serde(default)]
    pub prefetch_batches: Option<usize>,
    /// The bytes of samples the prefetched batches may hold when the loader sizes the window
    /// itself (default 64 MiB), counted at the source's in-memory block sizes (a Parquet row
    /// group's uncompressed size).
    #[serde(default = "default_prefetch_bytes")]
    pub prefetch_bytes: u64,
    /// Blocks read beyond those the prefetched batches need (default 32), in the plan's
    /// schedule order. This keeps workers busy when a plan needs many new blocks at once, as a
    /// block shuffle does at the start of each shuffle-buffer window, at the cost of holding at
    /// most this many extra blocks. At least one per worker is sensible.
    pub read_ahead_blocks: usize,
    /// Drop the last batch of an epoch when it is shorter than the batch size (default false).
    /// Size-budget plans (`Plan::with_batch_ends`) have no short batch: nothing is dropped.
    pub drop_last: bool,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
        Self {
            workers,
            prefetch_batches: None,
            prefetch_bytes: DEFAULT_PREFETCH_BYTES,
            read_ahead_blocks: 32,
            drop_last: false,
        }
    }
}

impl LoaderConfig {
    /// The default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the number of worker threads.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Sets how many batches are assembled ahead of the consumer (in place of the depth the
    /// loader sizes by `prefetch_bytes`).
    pub fn with_prefetch_batches(mut self, prefetch_batches: usize) -> Self {
        self.prefetch_batches = Some(prefetch_batches);
        self
    }

    /// Sets the bytes the prefetched batches may hold when the loader sizes the window.
    pub fn with_prefetch_bytes(mut self, prefetch_bytes: u64) -> Self {
        self.prefetch_bytes = prefetch_bytes;
        self
    }

    /// Sets how many blocks are read beyond those the prefetched batches need.
    pub fn with_read_ahead_blocks(mut self, read_ahead_blocks: usize) -> Self {
        self.read_ahead_blocks = read_ahead_blocks;
        self
    }

    /// Sets whether a short last batch is dropped.
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Fails unless there is at least one worker and one batch of prefetch.
    pub fn validate(&self) -> Result<()> {
        if self.workers == 0 {
            return Err(Error::InvalidConfig(
                "the loader needs at least 1 worker".to_owned(),
            ));
        }
        if self.prefetch_batches == Some(0) {
            return Err(Error::InvalidConfig(
                "the loader needs a prefetch depth of at least 1 batch".to_owned(),
            ));
        }
        if self.prefetch_batches.is_none() && self.prefetch_bytes == 0 {
            return Err(Error::InvalidConfig(
                "the loader needs a prefetch budget of at least 1 byte (prefetch_bytes = 0)"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zeros_are_not() {
        assert!(LoaderConfig::default().validate().is_ok());
        let error = LoaderConfig::new().with_workers(0).validate().unwrap_err();
        assert!(error.to_string().contains("at least 1 worker"), "{error}");
        let error = LoaderConfig::new()
            .with_prefetch_batches(0)
            .validate()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("prefetch depth of at least 1 batch"),
            "{error}"
        );
        let error = LoaderConfig::new()
            .with_prefetch_bytes(0)
            .validate()
            .unwrap_err();
        assert!(error.to_string().contains("prefetch_bytes"), "{error}");
        // A fixed depth needs no budget.
        let fixed = LoaderConfig::new()
            .with_prefetch_bytes(0)
            .with_prefetch_batches(4);
        assert!(fixed.validate().is_ok());
    }

    #[test]
    fn settings_saved_before_the_byte_budget_still_load() {
        let saved =
            r#"{"workers":2,"prefetch_batches":4,"read_ahead_blocks":32,"drop_last":false}"#;
        let config: LoaderConfig = serde_json::from_str(saved).unwrap();
        assert_eq!(config.prefetch_batches, Some(4));
        assert_eq!(config.prefetch_bytes, DEFAULT_PREFETCH_BYTES);
        let round_trip = serde_json::to_string(&LoaderConfig::new()).unwrap();
        assert_eq!(
            serde_json::from_str::<LoaderConfig>(&round_trip).unwrap(),
            LoaderConfig::new()
        );
    }
}
