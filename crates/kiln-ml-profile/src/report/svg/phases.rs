//! The phases panel: one row per action that has spans, each span a bar, every other step
//! shaded behind them; and the legend above it with each action's share of the time.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::panel::{Drawn, FONT, WIDTH, Y_LABEL_WIDTH, no_data, seconds};
use crate::phase::{Action, Span};

/// Every action that can have a row, top to bottom, with its colour. Waiting is warm, compute
/// is cool.
const PALETTE: [(Action, RGBColor); 8] = [
    (Action::DataWait, RGBColor(230, 85, 13)),
    (Action::HostToDevice, RGBColor(156, 102, 204)),
    (Action::Forward, RGBColor(49, 130, 189)),
    (Action::Backward, RGBColor(49, 163, 84)),
    (Action::Optimizer, RGBColor(23, 190, 207)),
    (Action::Validation, RGBColor(188, 189, 34)),
    (Action::Checkpoint, RGBColor(140, 86, 75)),
    (Action::Other, RGBColor(150, 150, 150)),
];
/// Behind the rows, every other whole step is shaded so step boundaries show.
const STEP_BAND: RGBColor = RGBColor(238, 238, 238);
/// The legend's distance from one entry to the next, in pixels.
const LEGEND_ENTRY_WIDTH: i32 = 175;

/// The rows drawn, top to bottom: the actions of [`PALETTE`] that have at least one span (the
/// phase timer records no `other` spans, and a run without validation has none of those).
pub(super) struct Rows(Vec<(Action, RGBColor)>);

impl Rows {
    /// The rows of the actions `spans` hold.
    pub(super) fn of<'a>(spans: impl IntoIterator<Item = &'a Span>) -> Self {
        let present: std::collections::HashSet<Action> =
            spans.into_iter().map(|span| span.action).collect();
        Self(
            PALETTE
                .into_iter()
                .filter(|(action, _)| present.contains(action))
                .collect(),
        )
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The row of `action`, counted from the top; `None` for an action without a row.
    fn index(&self, action: Action) -> Option<usize> {
        self.0.iter().position(|(row, _)| *row == action)
    }

    /// The action whose row is at height `y` (heights are counted from the bottom row's 0).
    fn at(&self, y: f64) -> Option<Action> {
        let rounded = y.round();
        if (y - rounded).abs() > 1e-6 || rounded < 0.0 || rounded >= self.len() as f64 {
            return None;
        }
        Some(self.0[self.len() - 1 - rounded as usize].0)
    }
}

/// One coloured box per row, with its action's share of the time drawn.
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &Rows,
    spans: &[&Span],
) -> Drawn<DB> {
    let mut totals = vec![0.0f64; rows.len()];
    for span in spans {
        if let Some(row) = rows.index(span.action) {
            totals[row] += seconds(span.duration);
        }
    }
    let all: f64 = totals.iter().sum();
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let mut x = Y_LABEL_WIDTH as i32;
    for ((action, color), total) in rows.0.iter().zip(totals) {
        area.draw(&Rectangle::new([(x, 9), (x + 14, 23)], color.filled()))?;
        let label = if all > 0.0 {
            format!("{} {:.1}%", action.name(), 100.0 * total / all)
        } else {
            action.name().to_owned()
        };
        area.draw_text(&label, &style, (x + 19, 16))?;
        x += LEGEND_ENTRY_WIDTH;
    }
    Ok(())
}

/// One row per action, each span a bar from its start to its end.
pub(super) fn draw_timeline<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &Rows,
    spans: &[&Span],
    time: Range<f64>,
) -> Drawn<DB> {
    if rows.is_empty() {
        return no_data(area, "Phases", "no spans hold a phase");
    }
    let height = rows.len() as f64;
    let row_label = |y: &f64| {
        rows.at(*y)
            .map(|action| action.name().to_owned())
            .unwrap_or_default()
    };
    let mut chart = ChartBuilder::on(area)
        .caption("Phases", (FONT, 16))
        .margin_right(20)
        .x_label_area_size(35)
        .y_label_area_size(Y_LABEL_WIDTH)
        .build_cartesian_2d(time.clone(), -0.5..height - 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len() + 1)
        .y_label_formatter(&row_label)
        .light_line_style(BLACK.mix(0.04))
        .x_desc("time (s)")
        .label_style((FONT, 13))
        .draw()?;
    chart.draw_series(
        spans
            .iter()
            .filter(|span| span.action == Action::Step && span.step % 2 == 0)
            .map(|span| {
                let (start, end) = extent(span, &time);
                Rectangle::new([(start, -0.5), (end, height - 0.5)], STEP_BAND.filled())
            }),
    )?;
    chart.draw_series(spans.iter().filter_map(|span| {
        let row = rows.index(span.action)?;
        let y = height - 1.0 - row as f64;
        let (start, end) = extent(span, &time);
        Some(Rectangle::new(
            [(start, y - 0.38), (end, y + 0.38)],
            rows.0[row].1.filled(),
        ))
    }))?;
    Ok(())
}

/// A span's bar, at least half a pixel wide so that short spans still show.
fn extent(span: &Span, time: &Range<f64>) -> (f64, f64) {
    let min_width = (time.end - time.start) / f64::from(2 * WIDTH);
    let start = seconds(span.start);
    (start, seconds(span.end()).max(start + min_width))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{span, steps};
    use super::*;

    #[test]
    fn only_actions_with_spans_get_rows() {
        let rows = Rows::of(&steps(10));
        let actions: Vec<Action> = rows.0.iter().map(|(action, _)| *action).collect();
        assert_eq!(
            actions,
            [
                Action::DataWait,
                Action::HostToDevice,
                Action::Forward,
                Action::Backward,
                Action::Optimizer,
                Action::Validation,
            ]
        );
        assert_eq!(rows.index(Action::Other), None);
        assert_eq!(rows.index(Action::Step), None);
        let only_steps = [span(
            Action::Step,
            0,
            Duration::ZERO,
            Duration::from_millis(5),
        )];
        assert!(Rows::of(&only_steps).is_empty());
    }

    #[test]
    fn rows_are_labelled_top_down_in_step_order() {
        let rows = Rows::of(&steps(10));
        assert_eq!(rows.at(5.0), Some(Action::DataWait));
        assert_eq!(rows.at(0.0), Some(Action::Validation));
        assert_eq!(rows.at(0.5), None);
        assert_eq!(rows.at(6.0), None);
        assert_eq!(rows.at(-1.0), None);
    }

    #[test]
    fn short_spans_are_at_least_half_a_pixel_wide() {
        let blink = span(Action::Forward, 0, Duration::from_secs(1), Duration::ZERO);
        let (start, end) = extent(&blink, &(0.0..2.8));
        assert_eq!(start, 1.0);
        assert!((end - start - 0.001).abs() < 1e-12, "{end}");
    }
}
