//! The whole picture: the title, the legend, the phases and the two device panels stacked on
//! one time axis, and the file it is written to.

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::device::{draw_memory, draw_utilization};
use super::panel::{Drawn, FONT, WIDTH, seconds};
use super::phases::{Rows, draw_legend, draw_timeline};
use super::window::{MAX_SPANS, time_range, window};
use crate::monitor::DeviceSample;
use crate::phase::Span;
use crate::{Error, Result};
use kiln_ml_core::{Durability, write_atomic};

const TITLE_HEIGHT: u32 = 44;
const LEGEND_HEIGHT: u32 = 30;
const TIMELINE_HEIGHT: u32 = 360;
const PANEL_HEIGHT: u32 = 250;
const HEIGHT: u32 = TITLE_HEIGHT + LEGEND_HEIGHT + TIMELINE_HEIGHT + 2 * PANEL_HEIGHT;

/// Draws a profile as an SVG timeline at `path`: the spans of each action as bars on one row
/// per action that has spans (with a legend giving each action's share of the time), then GPU
/// and CPU utilization, then memory (the memory probe's in use and reserved, which are Burn's
/// pool on a GPU backend and the heap with a `HeapProbe`; NVML's used; host RAM), all on the
/// same time axis in seconds. A figure no sample holds is named in its panel's caption ("no
/// samples hold ..."), and a panel with nothing to draw says what it lacks. With more than
/// about 2000 spans only the last steps are drawn, and the title says so. The file is written
/// through a temporary file and a rename.
pub fn write_timeline_svg(
    path: &Path,
    title: &str,
    spans: &[Span],
    samples: &[DeviceSample],
) -> Result<()> {
    let svg = render(title, spans, samples).map_err(|message| Error::Draw {
        path: path.to_owned(),
        message,
    })?;
    Ok(write_atomic(path, svg.as_bytes(), Durability::Synced)?)
}

/// The SVG text of the picture.
fn render(
    title: &str,
    spans: &[Span],
    samples: &[DeviceSample],
) -> std::result::Result<String, String> {
    let (shown, note) = window(spans, MAX_SPANS);
    // Rows for the actions drawn, not for those only in the steps left out.
    let rows = Rows::of(shown.iter().copied());
    let time = time_range(&shown, samples);
    // Only the samples in the time the spans cover (the monitor may start before `fit` and
    // stop after it): plotters clamps points past the axes onto the plot's edge, where the
    // others would stack as a false vertical line.
    let samples: Vec<&DeviceSample> = samples
        .iter()
        .filter(|sample| (time.start..=time.end).contains(&seconds(sample.at)))
        .collect();
    let heading = match &note {
        Some(note) => format!("{title} ({note})"),
        None => title.to_owned(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let page = Page {
            heading: &heading,
            rows: &rows,
            spans: &shown,
            samples: &samples,
            time,
        };
        page.draw(&root).map_err(|error| error.to_string())?;
        root.present().map_err(|error| error.to_string())?;
    }
    Ok(svg)
}

/// What the picture shows.
struct Page<'a> {
    heading: &'a str,
    rows: &'a Rows,
    spans: &'a [&'a Span],
    samples: &'a [&'a DeviceSample],
    time: Range<f64>,
}

impl Page<'_> {
    /// The title, then the legend, the phases, utilization and memory, top to bottom.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        root.fill(&WHITE)?;
        let body = root.titled(self.heading, (FONT, 22))?;
        let (legend, rest) = body.split_vertically(LEGEND_HEIGHT);
        let (timeline, rest) = rest.split_vertically(TIMELINE_HEIGHT);
        let (utilization, memory) = rest.split_vertically(PANEL_HEIGHT);
        draw_legend(&legend, self.rows, self.spans)?;
        draw_timeline(&timeline, self.rows, self.spans, self.time.clone())?;
        draw_utilization(&utilization, self.samples, self.time.clone())?;
        draw_memory(&memory, self.samples, self.time.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{assert_svg, draw, host_samples, rects, span, steps};
    use super::*;
    use crate::phase::Action;

    #[test]
    fn draws_every_action_with_spans_and_names_what_no_sample_holds() {
        let svg = draw(&steps(20), &host_samples(10));
        assert_svg(&svg);
        assert!(svg.contains("Train profile"));
        for action in [Action::DataWait, Action::Forward, Action::Validation] {
            assert!(svg.contains(action.name()), "{} missing", action.name());
        }
        // No NVML figures and no memory probe: those lines are named, without a cause.
        assert!(svg.contains("no samples hold GPU busy % (NVML)"), "{svg}");
        assert!(
            svg.contains("no samples hold probe in use MiB, probe reserved MiB"),
            "{svg}"
        );
        assert!(!svg.contains("unavailable"), "{svg}");
        assert!(svg.contains("CPU %") && svg.contains("RAM used MiB"));
        assert!(svg.contains("time (s)"));
    }

    #[test]
    fn samples_outside_the_spans_change_nothing_drawn() {
        // Ten steps and a validation pass take 0.22 s; the monitor ran for 0.9 s, then once
        // more 100 s later. Plotters clamps what lies past the axes onto the plot's edge, so
        // those samples would stack there.
        let spans = steps(10);
        let mut samples = host_samples(10);
        samples.push(DeviceSample {
            at: Duration::from_secs(100),
            ..samples[9].clone()
        });
        let end = spans.iter().map(Span::end).max().unwrap();
        let within: Vec<DeviceSample> = samples
            .iter()
            .filter(|sample| sample.at < end)
            .cloned()
            .collect();
        assert!(within.len() >= 2 && within.len() < samples.len());
        assert_eq!(draw(&spans, &samples), draw(&spans, &within));
    }

    #[test]
    fn an_action_without_spans_gets_no_row() {
        let without = draw(&steps(10), &[]);
        // Plotters writes a text element's content on a line of its own.
        assert!(
            !without.contains("\nother\n"),
            "an empty `other` row is drawn"
        );
        let mut spans = steps(10);
        spans.push(span(
            Action::Other,
            9,
            Duration::from_secs(1),
            Duration::from_millis(3),
        ));
        let with = draw(&spans, &[]);
        assert!(with.contains("\nother\n"), "{with}");
    }

    #[test]
    fn full_samples_leave_nothing_missing() {
        let samples: Vec<DeviceSample> = host_samples(10)
            .into_iter()
            .map(|sample| DeviceSample {
                gpu_utilization_percent: Some(90.0),
                gpu_memory_used_bytes: Some(3 << 30),
                gpu_memory_total_bytes: Some(80 << 30),
                pool_in_use_bytes: Some(2 << 30),
                pool_reserved_bytes: Some(5 << 29),
                ..sample
            })
            .collect();
        let svg = draw(&steps(10), &samples);
        assert_svg(&svg);
        assert!(!svg.contains("no samples hold"), "{svg}");
        assert!(svg.contains("GPU total 81920 MiB"));
        assert!(svg.contains("probe in use MiB") && svg.contains("probe reserved MiB"));
    }

    #[test]
    fn more_spans_draw_more_rectangles() {
        let few = rects(&draw(&steps(5), &[]));
        let many = rects(&draw(&steps(50), &[]));
        // Five bars per step, and a shaded band every other step.
        assert!(
            many >= few + 45 * 5,
            "{few} rects for 5 steps, {many} for 50"
        );
    }

    #[test]
    fn empty_inputs_still_make_a_picture() {
        let svg = draw(&[], &[]);
        assert_svg(&svg);
        assert!(svg.contains("no spans hold a phase"), "{svg}");
        assert!(
            svg.contains("no samples hold GPU busy % (NVML), CPU %"),
            "{svg}"
        );
    }

    #[test]
    fn long_runs_are_drawn_as_their_last_steps() {
        let spans = steps(3000);
        let svg = draw(&spans, &host_samples(700));
        assert_svg(&svg);
        assert!(
            svg.contains("steps shown"),
            "the title should say spans were left out"
        );
        assert!(rects(&svg) < MAX_SPANS + 200, "{} rects", rects(&svg));
        // Validation ran after step 5 only, long before the steps drawn: no row, no legend.
        assert!(!svg.contains("\nvalidation\n"), "a row for spans not drawn");
    }

    #[test]
    fn the_last_sample_is_drawn_too() {
        // Without spans the axis ends at the last sample: it is on the axis, not past it, so
        // each line (CPU %, RAM) has a point for every sample.
        let svg = draw(&[], &host_samples(3));
        let points: Vec<usize> = svg
            .split("<polyline")
            .skip(1)
            .map(|line| {
                let points = line.split("points=\"").nth(1).unwrap_or("");
                points[..points.find('"').unwrap_or(0)]
                    .split_whitespace()
                    .count()
            })
            .collect();
        assert!(
            points.iter().filter(|&&count| count == 3).count() >= 2,
            "{points:?}"
        );
    }

    #[test]
    fn an_unwritable_path_is_a_write_error() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("missing").join("timeline.svg");
        let error = write_timeline_svg(&path, "t", &steps(2), &[]).unwrap_err();
        assert!(matches!(error, Error::Write { .. }), "{error}");
    }
}
