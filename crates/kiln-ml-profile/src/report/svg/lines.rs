//! A panel of lines over time, one per figure of the samples, with gaps where samples lack it.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::panel::{Drawn, FONT, Y_LABEL_WIDTH, no_data, seconds};
use crate::monitor::DeviceSample;

/// A line of a figure read from each sample; `None` leaves a gap.
pub(super) struct Line {
    label: &'static str,
    color: RGBColor,
    dashed: bool,
    value: fn(&DeviceSample) -> Option<f64>,
}

impl Line {
    pub(super) fn solid(
        label: &'static str,
        color: RGBColor,
        value: fn(&DeviceSample) -> Option<f64>,
    ) -> Self {
        Self {
            label,
            color,
            dashed: false,
            value,
        }
    }

    pub(super) fn dashed(
        label: &'static str,
        color: RGBColor,
        value: fn(&DeviceSample) -> Option<f64>,
    ) -> Self {
        Self {
            dashed: true,
            ..Self::solid(label, color, value)
        }
    }
}

/// A panel of lines over time. Lines no sample has a figure for are named in the caption, and
/// a panel with no line at all says so instead of drawing empty axes; either way only what the
/// samples lack is said, not why.
pub(super) fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    samples: &[&DeviceSample],
    time: Range<f64>,
    y_max: Option<f64>,
    lines: &[Line],
) -> Drawn<DB> {
    let traced: Vec<(&Line, Segments)> = lines
        .iter()
        .map(|line| (line, segments(samples, line.value)))
        .collect();
    let missing: Vec<&str> = traced
        .iter()
        .filter(|(_, segments)| segments.is_empty())
        .map(|(line, _)| line.label)
        .collect();
    if missing.len() == lines.len() {
        return no_data(area, caption, &no_samples_hold(&missing));
    }
    let caption = if missing.is_empty() {
        caption.to_owned()
    } else {
        format!("{caption}; {}", no_samples_hold(&missing))
    };
    let highest = traced
        .iter()
        .flat_map(|(_, segments)| segments.iter().flatten())
        .map(|&(_, y)| y)
        .fold(0.0f64, f64::max);
    let top = y_max.unwrap_or((highest * 1.1).max(1.0));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 16))
        .margin_right(20)
        .x_label_area_size(35)
        .y_label_area_size(Y_LABEL_WIDTH)
        .build_cartesian_2d(time, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(BLACK.mix(0.04))
        .label_style((FONT, 13))
        .draw()?;
    for (line, segments) in traced.into_iter().filter(|(_, s)| !s.is_empty()) {
        let style = line.color.stroke_width(2);
        let color = line.color;
        if line.dashed {
            chart
                .draw_series(
                    segments
                        .into_iter()
                        .map(|points| DashedPathElement::new(points, 6, 4, style)),
                )?
                .label(line.label)
                .legend(move |(x, y)| {
                    DashedPathElement::new([(x, y), (x + 22, y)], 6, 4, color.stroke_width(2))
                });
        } else {
            chart
                .draw_series(
                    segments
                        .into_iter()
                        .map(|points| PathElement::new(points, style)),
                )?
                .label(line.label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 22, y)], color.stroke_width(2))
                });
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 13))
        .draw()?;
    Ok(())
}

/// "no samples hold A, B": what is missing, without guessing why (a source may be off, or
/// the window drawn may hold no samples).
fn no_samples_hold(labels: &[&str]) -> String {
    format!("no samples hold {}", labels.join(", "))
}

/// Runs of (seconds, value) points, each drawn as one unbroken line.
type Segments = Vec<Vec<(f64, f64)>>;

/// The runs of consecutive samples that have the figure.
fn segments(samples: &[&DeviceSample], value: fn(&DeviceSample) -> Option<f64>) -> Segments {
    let mut segments = Vec::new();
    let mut current = Vec::new();
    for sample in samples {
        match value(sample) {
            Some(y) if y.is_finite() => current.push((seconds(sample.at), y)),
            _ if !current.is_empty() => segments.push(std::mem::take(&mut current)),
            _ => {}
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    segments
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn samples_without_the_figure_break_the_line() {
        let samples: Vec<DeviceSample> = [Some(1.0), Some(2.0), None, Some(f64::NAN), Some(5.0)]
            .into_iter()
            .enumerate()
            .map(|(i, cpu)| DeviceSample {
                at: Duration::from_secs(i as u64),
                cpu_utilization_percent: cpu,
                ..DeviceSample::default()
            })
            .collect();
        let samples: Vec<&DeviceSample> = samples.iter().collect();
        let runs = segments(&samples, |s| s.cpu_utilization_percent);
        assert_eq!(runs, [vec![(0.0, 1.0), (1.0, 2.0)], vec![(4.0, 5.0)]]);
        assert!(segments(&samples, |s| s.gpu_power_watts).is_empty());
    }
}
