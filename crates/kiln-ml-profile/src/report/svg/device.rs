//! The two panels under the phases: utilization (GPU and CPU) and memory (the memory probe,
//! NVML, host RAM).

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::lines::{Line, draw_lines};
use super::panel::Drawn;
use crate::monitor::DeviceSample;

const MIB: f64 = 1024.0 * 1024.0;
const GPU_COLOR: RGBColor = RGBColor(214, 39, 40);
const CPU_COLOR: RGBColor = RGBColor(31, 119, 180);
/// The memory probe's lines: Burn's pool on a GPU backend, the heap with `HeapProbe`.
const PROBE_COLOR: RGBColor = RGBColor(148, 103, 189);
const RAM_COLOR: RGBColor = RGBColor(44, 160, 44);

/// GPU busy % (NVML) and host CPU %, on a 0-100 scale.
pub(super) fn draw_utilization<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    samples: &[&DeviceSample],
    time: Range<f64>,
) -> Drawn<DB> {
    draw_lines(
        area,
        "Utilization (%)",
        samples,
        time,
        Some(100.0),
        &[
            Line::solid("GPU busy % (NVML)", GPU_COLOR, |s| {
                s.gpu_utilization_percent
            }),
            Line::solid("CPU %", CPU_COLOR, |s| s.cpu_utilization_percent),
        ],
    )
}

/// The memory probe's in use (solid) and reserved (dashed), NVML's GPU used and host RAM, in
/// MiB, with the totals in the caption.
pub(super) fn draw_memory<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    samples: &[&DeviceSample],
    time: Range<f64>,
) -> Drawn<DB> {
    draw_lines(
        area,
        &memory_caption(samples),
        samples,
        time,
        None,
        &[
            Line::solid(
                "probe in use MiB",
                PROBE_COLOR,
                |s| mib(s.pool_in_use_bytes),
            ),
            Line::dashed("probe reserved MiB", PROBE_COLOR, |s| {
                mib(s.pool_reserved_bytes)
            }),
            Line::solid("GPU used MiB (NVML)", GPU_COLOR, |s| {
                mib(s.gpu_memory_used_bytes)
            }),
            Line::solid("RAM used MiB", RAM_COLOR, |s| mib(s.ram_used_bytes)),
        ],
    )
}

/// The memory panel's caption, with the totals the lines should be read against.
fn memory_caption(samples: &[&DeviceSample]) -> String {
    let last =
        |value: fn(&DeviceSample) -> Option<u64>| samples.iter().rev().find_map(|s| value(s));
    let mut caption = "Memory (MiB)".to_owned();
    if let Some(total) = last(|s| s.gpu_memory_total_bytes) {
        caption += &format!(", GPU total {:.0} MiB", total as f64 / MIB);
    }
    if let Some(total) = last(|s| s.ram_total_bytes) {
        caption += &format!(", RAM total {:.0} MiB", total as f64 / MIB);
    }
    caption
}

fn mib(bytes: Option<u64>) -> Option<f64> {
    bytes.map(|bytes| bytes as f64 / MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caption_gives_the_latest_totals_it_has() {
        let older = DeviceSample {
            gpu_memory_total_bytes: Some(80 << 30),
            ram_total_bytes: Some(4 << 30),
            ..DeviceSample::default()
        };
        let newer = DeviceSample {
            ram_total_bytes: Some(8 << 30),
            ..DeviceSample::default()
        };
        assert_eq!(
            memory_caption(&[&older, &newer]),
            "Memory (MiB), GPU total 81920 MiB, RAM total 8192 MiB"
        );
        assert_eq!(memory_caption(&[]), "Memory (MiB)");
    }
}
