//! What the loader tuner measured, and which setting it recommends.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One loader configuration to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LoaderSetting {
    /// Worker threads (0: the loader's own choice of reading on the calling thread, where it
    /// has one).
    pub workers: usize,
    /// Batches assembled ahead of the consumer.
    pub prefetch: usize,
}

/// One timed run of the loader.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoaderMeasurement {
    /// Worker threads.
    pub workers: usize,
    /// Prefetch depth, in batches.
    pub prefetch: usize,
    /// Samples the run read.
    pub samples: u64,
    /// How long the run took, building the loader included.
    pub seconds: f64,
    /// `samples / seconds`.
    pub samples_per_s: f64,
}

impl LoaderMeasurement {
    /// The setting this measurement was taken with.
    pub fn setting(&self) -> LoaderSetting {
        LoaderSetting {
            workers: self.workers,
            prefetch: self.prefetch,
        }
    }
}

/// The result of a [`LoaderTuner`](super::LoaderTuner) sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoaderTuning {
    /// Every measurement, in the order taken.
    pub measurements: Vec<LoaderMeasurement>,
    /// The fastest setting.
    pub best: LoaderSetting,
    /// The setting to use: see [`best_loader_setting`].
    pub recommended: LoaderSetting,
    /// How far below the best a recommendation may be (0.05: 5%).
    pub tolerance: f64,
}

impl LoaderTuning {
    /// The measurements as an aligned text table, the recommended row marked with `*`.
    pub fn table(&self) -> String {
        let header = ["workers", "prefetch", "samples", "seconds", "samples/s"];
        let rows: Vec<[String; 5]> = self
            .measurements
            .iter()
            .map(|m| {
                [
                    m.workers.to_string(),
                    m.prefetch.to_string(),
                    m.samples.to_string(),
                    format!("{:.3}", m.seconds),
                    format!("{:.1}", m.samples_per_s),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.len());
            }
        }
        let mut out = String::new();
        let mut line = |mark: &str, cells: &[&str]| {
            out.push_str(mark);
            for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
                let gap = if index == 0 { "" } else { "  " };
                let _ = write!(out, "{gap}{cell:>width$}");
            }
            out.push('\n');
        };
        line("  ", &header);
        for (row, measurement) in rows.iter().zip(&self.measurements) {
            let mark = if measurement.setting() == self.recommended {
                "* "
            } else {
                "  "
            };
            line(mark, &row.each_ref().map(String::as_str));
        }
        let _ = writeln!(
            out,
            "recommended: workers={} prefetch={} (fewest workers within {}% of the best, \
             workers={} prefetch={})",
            self.recommended.workers,
            self.recommended.prefetch,
            // Rounded: 0.07 * 100 is 7.000000000000001.
            (self.tolerance * 1e4).round() / 100.0,
            self.best.workers,
            self.best.prefetch,
        );
        out
    }
}

/// The setting with the fewest workers, then the smallest prefetch, whose throughput is within
/// `tolerance` (a fraction: 0.05 is 5%, clamped to 0..=1) of the best; `None` when there are no
/// measurements.
///
/// Not simply the fastest: past the point where the loader keeps up, extra workers and deeper
/// prefetch buy a few percent of noise and cost what the trainer wants, CPU cores for its own
/// host work and RAM for every prefetched batch and worker buffer. Measurements with a rate
/// that is not a number are ignored.
pub fn best_loader_setting(
    measurements: &[LoaderMeasurement],
    tolerance: f64,
) -> Option<LoaderSetting> {
    let measured = || measurements.iter().filter(|m| !m.samples_per_s.is_nan());
    let best = measured().map(|m| m.samples_per_s).max_by(f64::total_cmp)?;
    let tolerance = if tolerance.is_nan() {
        0.0
    } else {
        tolerance.clamp(0.0, 1.0)
    };
    let good_enough = best * (1.0 - tolerance);
    measured()
        .filter(|m| m.samples_per_s >= good_enough)
        .map(LoaderMeasurement::setting)
        .min_by_key(|setting| (setting.workers, setting.prefetch))
}

/// The fastest setting (the first measured, among equals).
pub(super) fn fastest(measurements: &[LoaderMeasurement]) -> Option<LoaderSetting> {
    measurements
        .iter()
        .filter(|m| !m.samples_per_s.is_nan())
        .reduce(|best, m| {
            if m.samples_per_s > best.samples_per_s {
                m
            } else {
                best
            }
        })
        .map(LoaderMeasurement::setting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(workers: usize, prefetch: usize, samples_per_s: f64) -> LoaderMeasurement {
        LoaderMeasurement {
            workers,
            prefetch,
            samples: 1000,
            seconds: 1000.0 / samples_per_s,
            samples_per_s,
        }
    }

    /// Throughput that saturates at 2 workers, prefetch barely mattering.
    fn saturating() -> Vec<LoaderMeasurement> {
        vec![
            measured(0, 2, 100.0),
            measured(1, 2, 180.0),
            measured(1, 4, 185.0),
            measured(2, 2, 390.0),
            measured(2, 4, 400.0),
            measured(4, 2, 405.0),
            measured(4, 8, 410.0),
        ]
    }

    fn setting(workers: usize, prefetch: usize) -> Option<LoaderSetting> {
        Some(LoaderSetting { workers, prefetch })
    }

    #[test]
    fn recommends_fewest_workers_within_tolerance() {
        let all = saturating();
        // Best 410; 5% below is 389.5: (2, 2) at 390 qualifies.
        assert_eq!(best_loader_setting(&all, 0.05), setting(2, 2));
        // 2% below is 401.8: only 4 workers qualify, prefetch 2 before 8.
        assert_eq!(best_loader_setting(&all, 0.02), setting(4, 2));
        assert_eq!(best_loader_setting(&all, 0.0), setting(4, 8));
        assert_eq!(best_loader_setting(&all, 0.9), setting(0, 2));
        assert_eq!(fastest(&all), setting(4, 8));
    }

    #[test]
    fn ties_go_to_the_smaller_setting_and_nan_is_ignored() {
        let tied = [
            measured(2, 8, 300.0),
            measured(2, 4, 300.0),
            measured(1, 2, f64::NAN),
        ];
        assert_eq!(best_loader_setting(&tied, 0.0), setting(2, 4));
        assert_eq!(fastest(&tied), setting(2, 8));
        assert_eq!(best_loader_setting(&[], 0.05), None);
        assert_eq!(best_loader_setting(&[measured(1, 2, f64::NAN)], 0.05), None);
    }

    #[test]
    fn table_aligns_columns_and_marks_the_recommendation() {
        let measurements = saturating();
        let tuning = LoaderTuning {
            best: fastest(&measurements).unwrap(),
            recommended: best_loader_setting(&measurements, 0.05).unwrap(),
            measurements,
            tolerance: 0.05,
        };
        let table = tuning.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "  workers  prefetch  samples  seconds  samples/s");
        assert_eq!(lines[4], "*       2         2     1000    2.564      390.0");
        assert_eq!(lines.iter().filter(|line| line.starts_with('*')).count(), 1);
        let widths: Vec<usize> = lines[..8].iter().map(|line| line.len()).collect();
        assert!(widths.iter().all(|&width| width == widths[0]), "{table}");
        assert!(
            lines[8].starts_with("recommended: workers=2 prefetch=2"),
            "{table}"
        );
        let odd = LoaderTuning {
            tolerance: 0.07,
            ..tuning
        };
        assert!(
            odd.table().contains("within 7% of the best"),
            "{}",
            odd.table()
        );
    }
}
