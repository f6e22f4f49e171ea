//! Running count, total, minimum and maximum of durations.

use std::time::Duration;

/// Durations seen so far: how many, their sum, the shortest and the longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Tally {
    pub(crate) calls: u64,
    pub(crate) total: Duration,
    pub(crate) min: Option<Duration>,
    pub(crate) max: Option<Duration>,
}

impl Tally {
    pub(crate) fn add(&mut self, duration: Duration) {
        self.calls += 1;
        self.total += duration;
        self.min = Some(self.min.map_or(duration, |min| min.min(duration)));
        self.max = Some(self.max.map_or(duration, |max| max.max(duration)));
    }

    /// The mean, or zero before the first call.
    pub(crate) fn mean(&self) -> Duration {
        if self.calls == 0 {
            Duration::ZERO
        } else {
            self.total.div_f64(self.calls as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_count_sum_and_extremes() {
        let mut tally = Tally::default();
        assert_eq!(tally.mean(), Duration::ZERO);
        for ms in [4, 1, 7] {
            tally.add(Duration::from_millis(ms));
        }
        assert_eq!(tally.calls, 3);
        assert_eq!(tally.total, Duration::from_millis(12));
        assert_eq!(tally.mean(), Duration::from_millis(4));
        assert_eq!(tally.min, Some(Duration::from_millis(1)));
        assert_eq!(tally.max, Some(Duration::from_millis(7)));
    }
}
