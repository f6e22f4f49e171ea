//! Reads of a source's figures that failed, counted per figure for the monitor's record.

use std::collections::BTreeMap;

/// Per figure: how many reads failed and the last error, so a record can say why a figure it
/// lacks is missing.
#[derive(Debug, Default)]
pub(crate) struct ReadFailures {
    figures: BTreeMap<&'static str, (u64, String)>,
}

impl ReadFailures {
    /// Counts a failed read of `figure`.
    pub(crate) fn record(&mut self, figure: &'static str, error: impl ToString) {
        let entry = self.figures.entry(figure).or_default();
        entry.0 += 1;
        entry.1 = error.to_string();
    }

    /// Keeps `result`'s value, counting its error against `figure`.
    pub(crate) fn keep<T, E: ToString>(
        &mut self,
        figure: &'static str,
        result: Result<T, E>,
    ) -> Option<T> {
        result.map_err(|error| self.record(figure, error)).ok()
    }

    /// `figure: N reads failed, the last: ERROR` for each figure, `; `-separated; `None` when
    /// every read succeeded.
    pub(crate) fn describe(&self) -> Option<String> {
        (!self.figures.is_empty()).then(|| {
            self.figures
                .iter()
                .map(|(figure, (count, last))| {
                    format!("{figure}: {count} reads failed, the last: {last}")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_per_figure_with_the_last_error() {
        let mut failures = ReadFailures::default();
        assert_eq!(failures.describe(), None);
        assert_eq!(failures.keep("power", Ok::<_, String>(5)), Some(5));
        assert_eq!(failures.describe(), None);
        failures.keep("utilization", Err::<u32, _>("Not Supported"));
        failures.keep("utilization", Err::<u32, _>("Not Supported again"));
        failures.record("clock", "GPU lost");
        assert_eq!(
            failures.describe().unwrap(),
            "clock: 1 reads failed, the last: GPU lost; utilization: 2 reads failed, the last: \
             Not Supported again"
        );
    }
}
