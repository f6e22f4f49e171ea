//! How a remote source retries a request that failed in a way that may pass.

use std::time::Duration;

/// Retries of object-store requests (listing, footers, row groups) that fail in a way that may
/// pass: a refused or dropped connection, a timeout, a 5xx or 429 answer. A missing object,
/// denied access, an invalid path or a failed precondition fail at once. Other HTTP errors
/// (a 400, a 416) are retried too: object_store reports them as it reports a 5xx, and tells
/// them apart only in text.
///
/// The wait before retry `n` (from 1) is `initial_backoff × 2^(n-1)`, capped at `max_backoff`.
/// After `attempts` requests the read fails with [`Error::Remote`](crate::Error::Remote),
/// naming the URL, the row group and the store's last error. The default, 5 attempts from
/// 100 ms, rides out about 1.5 s of trouble.
///
/// ```
/// use std::time::Duration;
/// use kiln_ml_data::RetryPolicy;
///
/// let patient = RetryPolicy::default().with_attempts(8).with_max_backoff(Duration::from_secs(10));
/// assert_eq!(patient.backoff_before(1), Duration::from_millis(100));
/// assert_eq!(patient.backoff_before(3), Duration::from_millis(400));
/// assert_eq!(patient.backoff_before(20), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Requests made at most, the first included (at least 1).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The wait before the first retry.
    pub fn with_initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// The longest wait between two attempts.
    pub fn with_max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// Requests made at most.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before retry `retry` (counting from 1).
    pub fn backoff_before(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }
}
