//! Which spans a long run is drawn with, and the time axis they span.

use std::collections::BTreeMap;
use std::ops::Range;

use super::panel::seconds;
use crate::monitor::DeviceSample;
use crate::phase::Span;

/// Spans drawn at most. An SVG with tens of thousands of rectangles opens slowly and shows
/// nothing a viewer could tell apart, so longer runs are drawn as their last steps.
pub(super) const MAX_SPANS: usize = 2000;

/// The spans to draw: all of them, or when there are more than `max`, the last whole steps
/// that fit, with a note saying what was left out.
pub(super) fn window(spans: &[Span], max: usize) -> (Vec<&Span>, Option<String>) {
    if spans.len() <= max {
        return (spans.iter().collect(), None);
    }
    let mut per_step: BTreeMap<u64, usize> = BTreeMap::new();
    for span in spans {
        *per_step.entry(span.step).or_default() += 1;
    }
    let mut kept = 0;
    let mut kept_steps = 0;
    let mut first = None;
    for (&step, &count) in per_step.iter().rev() {
        if kept + count > max {
            break;
        }
        kept += count;
        kept_steps += 1;
        first = Some(step);
    }
    match first {
        Some(first) => (
            spans.iter().filter(|span| span.step >= first).collect(),
            Some(format!(
                "last {kept_steps} of {} steps shown: {kept} of {} spans",
                per_step.len(),
                spans.len()
            )),
        ),
        // The last step alone has more spans than fit: its latest ones.
        None => {
            let mut latest: Vec<&Span> = spans.iter().collect();
            latest.sort_by_key(|span| span.start);
            let latest = latest.split_off(latest.len() - max);
            let note = format!("last {max} of {} spans shown", spans.len());
            (latest, Some(note))
        }
    }
}

/// The time axis: the spans shown (or, without spans, the samples), never empty.
pub(super) fn time_range(spans: &[&Span], samples: &[DeviceSample]) -> Range<f64> {
    let bounds: Vec<(f64, f64)> = if spans.is_empty() {
        samples
            .iter()
            .map(|sample| (seconds(sample.at), seconds(sample.at)))
            .collect()
    } else {
        spans
            .iter()
            .map(|span| (seconds(span.start), seconds(span.end())))
            .collect()
    };
    let start = bounds.iter().map(|b| b.0).fold(f64::INFINITY, f64::min);
    let end = bounds.iter().map(|b| b.1).fold(f64::NEG_INFINITY, f64::max);
    if !start.is_finite() || !end.is_finite() {
        return 0.0..1.0;
    }
    if end > start {
        start..end
    } else {
        start..start + 1.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixtures::{span, steps};
    use super::*;
    use crate::phase::Action;

    #[test]
    fn the_window_keeps_whole_last_steps() {
        let spans = steps(100);
        // Ten steps of six spans each fit exactly; no step is cut.
        let (shown, note) = window(&spans, 60);
        assert_eq!(shown.len(), 60);
        assert!(shown.iter().all(|span| span.step >= 90));
        assert_eq!(
            note.as_deref(),
            Some("last 10 of 100 steps shown: 60 of 601 spans")
        );
        let (all, none) = window(&spans, spans.len());
        assert_eq!((all.len(), none), (spans.len(), None));
    }

    #[test]
    fn a_step_too_long_for_the_window_keeps_its_latest_spans() {
        let spans: Vec<Span> = (0..10)
            .map(|i| {
                let start = Duration::from_millis(10 * i);
                span(Action::Forward, 0, start, Duration::from_millis(5))
            })
            .collect();
        let (shown, note) = window(&spans, 4);
        let starts: Vec<u128> = shown.iter().map(|span| span.start.as_millis()).collect();
        assert_eq!(starts, [60, 70, 80, 90]);
        assert_eq!(note.as_deref(), Some("last 4 of 10 spans shown"));
    }

    #[test]
    fn the_time_axis_is_never_empty() {
        assert_eq!(time_range(&[], &[]), 0.0..1.0);
        let one = span(Action::Forward, 0, Duration::from_secs(2), Duration::ZERO);
        assert_eq!(time_range(&[&one], &[]), 2.0..3.0);
        let samples = [
            DeviceSample {
                at: Duration::from_secs(1),
                ..DeviceSample::default()
            },
            DeviceSample {
                at: Duration::from_secs(4),
                ..DeviceSample::default()
            },
        ];
        assert_eq!(time_range(&[], &samples), 1.0..4.0);
    }
}
