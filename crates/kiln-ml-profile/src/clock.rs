//! One time origin shared by the phase timer and the device monitor, so their records line up
//! on one timeline.

use std::time::{Duration, Instant};

/// The origin of a profile's timeline. Copy it into every recorder of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Time since the origin.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// `instant` as an offset from the origin (zero for instants before it).
    pub fn offset(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.origin)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::start()
    }
}
