//! The three search strategies as pure state machines: given what the last trial did, which
//! batch size to try next, or the answer.

use serde::{Deserialize, Serialize};

/// How the finder moves between batch sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinderMode {
    /// Lightning's `power`: double until a trial runs out of memory, then stop at the last
    /// size that fitted (a power of two times the start, up to half the true maximum below).
    Power,
    /// Lightning's `binsearch`: double until out of memory, then bisect between the largest
    /// size that fitted and the smallest that did not; the answer keeps a safety margin.
    BinSearch,
    /// Accelerate's `find_executable_batch_size`: start high and multiply by the shrink factor
    /// (0.9) after each out-of-memory trial. Never grows.
    Shrink,
}

/// The next move of a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Try this size.
    Try(usize),
    /// The search is over; the largest size that fitted (before any margin), if one did.
    Done(Option<usize>),
}

/// One search in progress.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    mode: FinderMode,
    cap: usize,
    max_trials: usize,
    shrink_factor: f64,
    /// The largest size that fitted so far.
    low: Option<usize>,
    /// The smallest size that ran out of memory so far.
    high: Option<usize>,
    trials: usize,
    successes: usize,
}

impl Search {
    /// A search that never tries more than `cap` (the size limit and the dataset size).
    pub(crate) fn new(mode: FinderMode, cap: usize, max_trials: usize, shrink_factor: f64) -> Self {
        Self {
            mode,
            cap: cap.max(1),
            max_trials: max_trials.max(1),
            shrink_factor,
            low: None,
            high: None,
            trials: 0,
            successes: 0,
        }
    }

    /// The first size to try for a requested start.
    pub(crate) fn first(&self, start: usize) -> usize {
        start.clamp(1, self.cap)
    }

    /// Records what a trial at `size` did and says what to do next.
    pub(crate) fn record(&mut self, size: usize, fits: bool) -> Next {
        self.trials += 1;
        if fits {
            self.successes += 1;
            self.low = Some(self.low.map_or(size, |low| low.max(size)));
        } else {
            self.high = Some(self.high.map_or(size, |high| high.min(size)));
        }
        let out_of_trials = match self.mode {
            // Lightning's binsearch counts successful trials (#21187); the others all trials.
            FinderMode::BinSearch => self.successes >= self.max_trials,
            FinderMode::Power | FinderMode::Shrink => self.trials >= self.max_trials,
        };
        if out_of_trials {
            return Next::Done(self.low);
        }
        match self.mode {
            FinderMode::Power => self.power(size, fits),
            FinderMode::BinSearch => self.bisect(size, fits),
            FinderMode::Shrink => self.shrink(size, fits),
        }
    }

    fn power(&self, size: usize, fits: bool) -> Next {
        match (fits, self.low) {
            (true, _) if size >= self.cap => Next::Done(self.low),
            // Doubling again would repeat a size already out of memory.
            (true, _) if self.high.is_some_and(|high| size.saturating_mul(2) >= high) => {
                Next::Done(self.low)
            }
            (true, _) => Next::Try(size.saturating_mul(2).min(self.cap)),
            // Out of memory after a success: the last success is the answer (Lightning #14372).
            (false, Some(_)) => Next::Done(self.low),
            (false, None) if size <= 1 => Next::Done(None),
            (false, None) => Next::Try(size / 2),
        }
    }

    fn bisect(&self, size: usize, fits: bool) -> Next {
        if fits && self.high.is_none() {
            return if size >= self.cap {
                Next::Done(self.low)
            } else {
                Next::Try(size.saturating_mul(2).min(self.cap))
            };
        }
        // Unlike Lightning (which starts from `low = 1` untested), the lower bound is always a
        // size that was tried and fitted, so "nothing fits" is told apart from "1 fits".
        let low = self.low.unwrap_or(0);
        let high = self.high.unwrap_or(self.cap.saturating_add(1));
        if high - low <= 1 {
            Next::Done(self.low)
        } else {
            Next::Try(low + (high - low) / 2)
        }
    }

    fn shrink(&self, size: usize, fits: bool) -> Next {
        if fits {
            return Next::Done(Some(size));
        }
        if size <= 1 {
            return Next::Done(None);
        }
        // Size 1 is always tried before giving up: a small factor (0.3 from 3 gives 0) would
        // otherwise stop above sizes that fit.
        let next = (size as f64 * self.shrink_factor).floor() as usize;
        Next::Try(next.clamp(1, size - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs a search against a device on which sizes up to `limit` fit; returns the answer and
    /// the sizes tried.
    fn run(
        mode: FinderMode,
        start: usize,
        cap: usize,
        limit: usize,
    ) -> (Option<usize>, Vec<usize>) {
        run_shrinking(mode, start, cap, limit, 0.9)
    }

    /// [`run`] with a shrink factor of `factor`.
    fn run_shrinking(
        mode: FinderMode,
        start: usize,
        cap: usize,
        limit: usize,
        factor: f64,
    ) -> (Option<usize>, Vec<usize>) {
        let mut search = Search::new(mode, cap, 25, factor);
        let mut size = search.first(start);
        let mut tried = Vec::new();
        loop {
            tried.push(size);
            match search.record(size, size <= limit) {
                Next::Try(next) => size = next,
                Next::Done(found) => return (found, tried),
            }
        }
    }

    #[test]
    fn power_doubles_until_out_of_memory() {
        assert_eq!(
            run(FinderMode::Power, 2, 8192, 100),
            (Some(64), vec![2, 4, 8, 16, 32, 64, 128])
        );
        // Out of memory at once: halve until something fits, then stop.
        assert_eq!(
            run(FinderMode::Power, 16, 8192, 5),
            (Some(4), vec![16, 8, 4])
        );
        // Capped by the dataset: the cap itself is tried.
        assert_eq!(
            run(FinderMode::Power, 2, 12, 100),
            (Some(12), vec![2, 4, 8, 12])
        );
        assert_eq!(run(FinderMode::Power, 2, 8192, 0), (None, vec![2, 1]));
    }

    #[test]
    fn binsearch_finds_the_exact_limit() {
        let (found, tried) = run(FinderMode::BinSearch, 2, 8192, 100);
        assert_eq!(found, Some(100));
        assert_eq!(&tried[..7], &[2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(run(FinderMode::BinSearch, 2, 8192, 1).0, Some(1));
        assert_eq!(run(FinderMode::BinSearch, 2, 8192, 0), (None, vec![2, 1]));
        assert_eq!(run(FinderMode::BinSearch, 2, 8192, 9000).0, Some(8192));
    }

    #[test]
    fn shrink_multiplies_by_the_factor_and_never_grows() {
        assert_eq!(
            run(FinderMode::Shrink, 128, 8192, 100),
            (Some(92), vec![128, 115, 103, 92])
        );
        assert_eq!(
            run(FinderMode::Shrink, 128, 8192, 500),
            (Some(128), vec![128])
        );
        assert_eq!(run(FinderMode::Shrink, 2, 8192, 0), (None, vec![2, 1]));
        // A small factor still reaches size 1 (0.3 x 3 rounds to 0).
        assert_eq!(
            run_shrinking(FinderMode::Shrink, 128, 8192, 2, 0.3),
            (Some(1), vec![128, 38, 11, 3, 1])
        );
    }

    proptest! {
        #[test]
        fn every_mode_answers_a_size_that_fits(limit in 0usize..5000, start in 1usize..300, cap in 1usize..9000) {
            for mode in [FinderMode::Power, FinderMode::BinSearch, FinderMode::Shrink] {
                let (found, tried) = run(mode, start, cap, limit);
                prop_assert!(tried.iter().all(|&size| size >= 1 && size <= cap));
                // Lightning's binsearch counts only the trials that fit.
                let counted = if mode == FinderMode::BinSearch {
                    tried.iter().filter(|&&size| size <= limit).count()
                } else {
                    tried.len()
                };
                prop_assert!(counted <= 25);
                if let Some(found) = found {
                    prop_assert!(found <= limit && found <= cap);
                    prop_assert!(tried.contains(&found));
                }
                if mode == FinderMode::BinSearch && counted < 25 {
                    // Bisection lands on the true limit whenever it stays within its trials.
                    let truth = limit.min(cap);
                    prop_assert_eq!(found.unwrap_or(0), truth);
                }
            }
        }
    }
}
