//! The monitor's samples, thinned on long runs so that they stay within a bound.

use super::DeviceSample;

/// The samples taken so far, at most `limit` of them: when full, every other sample is
/// dropped and only every second sample taken afterwards is kept, so the log still spans the
/// whole run, evenly, at half the rate (the timer's spans keep the newest instead: a run's
/// device figures are read over its whole length).
#[derive(Debug)]
pub(crate) struct SampleLog {
    samples: Vec<DeviceSample>,
    limit: usize,
    /// Samples taken, kept or not.
    taken: u64,
    /// One taken sample in `kept_every` is kept (a power of two).
    kept_every: u64,
}

impl SampleLog {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            samples: Vec::new(),
            limit: limit.max(2),
            taken: 0,
            kept_every: 1,
        }
    }

    /// Adds the next sample taken (kept when its index is a multiple of `kept_every`).
    pub(crate) fn push(&mut self, sample: DeviceSample) {
        let index = self.taken;
        self.taken += 1;
        if !index.is_multiple_of(self.kept_every) {
            return;
        }
        if self.samples.len() >= self.limit {
            // Kept samples are taken indices 0, k, 2k, ...: keeping the even positions leaves
            // 0, 2k, 4k, ...
            let mut position = 0;
            self.samples.retain(|_| {
                position += 1;
                position % 2 == 1
            });
            self.kept_every *= 2;
            if !index.is_multiple_of(self.kept_every) {
                return;
            }
        }
        self.samples.push(sample);
    }

    pub(crate) fn samples(&self) -> &[DeviceSample] {
        &self.samples
    }

    pub(crate) fn take(&mut self) -> Vec<DeviceSample> {
        std::mem::take(&mut self.samples)
    }

    /// One sample in how many taken is kept (1 until the log first filled).
    pub(crate) fn kept_every(&self) -> u64 {
        self.kept_every
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sample(index: u64) -> DeviceSample {
        DeviceSample {
            at: Duration::from_millis(index),
            ..DeviceSample::default()
        }
    }

    fn kept(log: &SampleLog) -> Vec<u64> {
        log.samples()
            .iter()
            .map(|sample| sample.at.as_millis() as u64)
            .collect()
    }

    #[test]
    fn a_full_log_keeps_an_even_spread_of_the_whole_run() {
        let mut log = SampleLog::new(4);
        (0..4).for_each(|index| log.push(sample(index)));
        assert_eq!(kept(&log), [0, 1, 2, 3]);
        log.push(sample(4));
        assert_eq!(kept(&log), [0, 2, 4]);
        assert_eq!(log.kept_every(), 2);
        (5..17).for_each(|index| log.push(sample(index)));
        assert_eq!(kept(&log), [0, 8, 16]);
        assert_eq!(log.kept_every(), 8);
        // Any number of samples: never more than the limit, always from the first taken.
        let mut long = SampleLog::new(100);
        (0..100_000).for_each(|index| long.push(sample(index)));
        assert!(long.samples().len() <= 100);
        assert_eq!(kept(&long)[0], 0);
        let step = long.kept_every();
        assert!(kept(&long).windows(2).all(|pair| pair[1] - pair[0] == step));
    }
}
