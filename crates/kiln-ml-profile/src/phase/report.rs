//! The phase timer's report: a table like Lightning's `SimpleProfiler`, and its JSON.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Action, TimingMode};

/// Where the time went, per action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The table's title.
    pub title: String,
    /// How the phases were timed.
    pub mode: TimingMode,
    /// Wall time from the start of the run (the call of `fit`, once it reported its first
    /// step; otherwise the first event) to the last event, in seconds.
    pub wall_seconds: f64,
    /// Optimizer steps completed, not counting the run's first step once the trainer reported
    /// it (`Event::FirstStep`): that one has its own `first_step` row.
    pub steps: u64,
    /// Of those, the steps in which every phase ended with a device sync.
    pub accurate_steps: u64,
    /// Batches the trainer took from its data (`BatchReady`).
    pub batches: u64,
    /// Samples in those batches.
    pub samples: u64,
    /// Batches a kiln-ml-data loader handed over (`BatchLoaded`), when the timer observes one.
    pub loader_batches: u64,
    /// Device syncs the timing added.
    pub sync_calls: u64,
    /// Their total time, in seconds; already included in the phases they ended.
    pub sync_seconds: f64,
    /// One row per action seen, in the order of [`Action::ALL`]: the phases of a step, then
    /// `step` (once a step was timed) and `first_step`.
    pub rows: Vec<PhaseRow>,
    /// Spans not kept for traces because the timer's span limit was reached.
    pub spans_dropped: u64,
}

/// One action's line of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRow {
    /// The action.
    pub action: Action,
    /// How many times it ran.
    pub calls: u64,
    /// Its mean duration, in seconds.
    pub mean_seconds: f64,
    /// Its total duration, in seconds.
    pub total_seconds: f64,
    /// Its share of the wall time, in percent.
    pub percent: f64,
    /// Whether the figures are estimated from the accurate steps of cheap mode rather than
    /// measured on every step.
    pub estimated: bool,
}

impl PhaseReport {
    /// The row of an action, by its name (`forward`, `data_wait`, ...).
    pub fn row(&self, action: &str) -> Option<&PhaseRow> {
        self.rows.iter().find(|row| row.action.name() == action)
    }

    /// The share of the wall time spent waiting for data, in [0, 1].
    pub fn data_wait_share(&self) -> f64 {
        self.row("data_wait")
            .map_or(0.0, |row| row.percent / 100.0)
            .clamp(0.0, 1.0)
    }

    /// The report as a text table, sorted by share of the wall time like Lightning's
    /// `SimpleProfiler`: `Action | Mean duration (s) | Num calls | Total time (s) | Percentage %`,
    /// with a `Total` row (the wall time). Estimated rows are marked `~`.
    pub fn table(&self) -> String {
        let mut rows: Vec<&PhaseRow> = self
            .rows
            .iter()
            .filter(|row| row.action != Action::Step)
            .collect();
        rows.sort_by(|a, b| b.percent.total_cmp(&a.percent));
        let step = self.row("step");
        let headers = [
            "Action",
            "Mean duration (s)",
            "Num calls",
            "Total time (s)",
            "Percentage %",
        ];
        let mut lines: Vec<[String; 5]> = Vec::new();
        lines.push(headers.map(str::to_owned));
        lines.push([
            "Total".to_owned(),
            "-".to_owned(),
            "-".to_owned(),
            format!("{:.4}", self.wall_seconds),
            "100 %".to_owned(),
        ]);
        for row in rows.into_iter().chain(step) {
            let mark = if row.estimated { "~" } else { "" };
            lines.push([
                format!("{}{mark}", row.action.name()),
                format!("{:.6}", row.mean_seconds),
                row.calls.to_string(),
                format!("{:.4}", row.total_seconds),
                format!("{:.1} %", row.percent),
            ]);
        }
        let widths: Vec<usize> = (0..5)
            .map(|column| {
                lines
                    .iter()
                    .map(|line| line[column].len())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let rule = "-".repeat(widths.iter().sum::<usize>() + 3 * 4 + 4);
        let mut out = String::new();
        let _ = writeln!(out, "{} ({})", self.title, self.mode_text());
        let _ = writeln!(out, "{rule}");
        for (index, line) in lines.iter().enumerate() {
            let cells: Vec<String> = line
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(column, (cell, width))| {
                    if column == 0 {
                        format!("{cell:<width$}")
                    } else {
                        format!("{cell:>width$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
            if index == 0 || index == 1 {
                let _ = writeln!(out, "{rule}");
            }
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(
            out,
            "{} steps ({} timed at every phase), {} batches, {} samples; {} device syncs took \
             {:.4} s (included above).",
            self.steps,
            self.accurate_steps,
            self.batches,
            self.samples,
            self.sync_calls,
            self.sync_seconds
        );
        if let Some(first) = self.row("first_step") {
            let _ = writeln!(
                out,
                "first_step: {:.3} s from the start of training to the end of its first step \
                 (kernel compilation on a GPU; validation and checkpoints before it keep their \
                 rows), left out of the other rows.",
                first.total_seconds
            );
        }
        if self.rows.iter().any(|row| row.estimated) {
            let note = if self.accurate_steps == 0 {
                "~ host enqueue times: no step was timed at every phase yet (cheap mode times \
                 one step in N)."
            } else {
                "~ estimated: every step's time outside the data wait is split as in the steps \
                 timed at every phase."
            };
            let _ = writeln!(out, "{note}");
        }
        out
    }

    fn mode_text(&self) -> String {
        match self.mode {
            TimingMode::Accurate => "accurate: a device sync at every phase".to_owned(),
            TimingMode::Cheap { every } => {
                format!(
                    "cheap: every phase of 1 step in {every} synced, the step before it once, \
                     none between"
                )
            }
            TimingMode::Host => "host: no device sync".to_owned(),
        }
    }
}
