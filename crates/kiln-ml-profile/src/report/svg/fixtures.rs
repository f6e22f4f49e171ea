//! Timelines for the picture's tests: synthetic steps, host-only samples, and a drawn SVG read
//! back as text.

use std::time::Duration;

use super::write_timeline_svg;
use crate::monitor::DeviceSample;
use crate::phase::{Action, Span};

/// `count` synthetic steps of 19 ms, as the phase timer records them (every phase but
/// validation, then the step itself; no `other` spans), with a validation pass after step 5.
pub(super) fn steps(count: u64) -> Vec<Span> {
    let phases = [
        (Action::DataWait, 2),
        (Action::HostToDevice, 1),
        (Action::Forward, 6),
        (Action::Backward, 8),
        (Action::Optimizer, 2),
    ];
    let mut spans = Vec::new();
    let mut at = Duration::ZERO;
    for step in 0..count {
        let step_start = at;
        for (action, millis) in phases {
            let duration = Duration::from_millis(millis);
            spans.push(span(action, step, at, duration));
            at += duration;
        }
        spans.push(span(Action::Step, step, step_start, at - step_start));
        if step == 5 {
            let duration = Duration::from_millis(30);
            spans.push(span(Action::Validation, step, at, duration));
            at += duration;
        }
    }
    spans
}

pub(super) fn span(action: Action, step: u64, start: Duration, duration: Duration) -> Span {
    Span {
        action,
        step,
        start,
        duration,
        sync: None,
    }
}

/// Host figures only, as on a machine without NVML and a CPU backend without a memory probe.
pub(super) fn host_samples(count: u64) -> Vec<DeviceSample> {
    (0..count)
        .map(|i| DeviceSample {
            at: Duration::from_millis(100 * i),
            cpu_utilization_percent: Some(50.0 + (i % 5) as f64),
            ram_used_bytes: Some((1000 + i) << 20),
            ram_total_bytes: Some(8 << 30),
            ..DeviceSample::default()
        })
        .collect()
}

/// The picture of `spans` and `samples`, written to a file and read back.
pub(super) fn draw(spans: &[Span], samples: &[DeviceSample]) -> String {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("timeline.svg");
    write_timeline_svg(&path, "Train profile", spans, samples).unwrap();
    std::fs::read_to_string(&path).unwrap()
}

/// A well-formed-looking SVG document: one root, closed, text elements balanced.
pub(super) fn assert_svg(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
}

pub(super) fn rects(svg: &str) -> usize {
    svg.matches("<rect").count()
}
