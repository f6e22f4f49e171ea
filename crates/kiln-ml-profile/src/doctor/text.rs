//! The doctor's report for people: sections, a column of labels, wrapped reasons.

use std::fmt::Write;

use super::report::SystemReport;

/// Width of the label column.
const LABEL: usize = 18;
/// Lines are wrapped to this many characters.
const WIDTH: usize = 100;

impl SystemReport {
    /// The report as aligned text in sections: CPU, RAM, NVIDIA GPUs, Vulkan adapters, Burn
    /// backends, then the recommendations with their reasons.
    pub fn to_text(&self) -> String {
        let mut text = Text::default();
        text.section("CPU");
        let cpu = &self.cpu;
        let model = if cpu.model.is_empty() {
            "unknown"
        } else {
            &cpu.model
        };
        text.row("model", model);
        text.row(
            "cores",
            &format!(
                "{} physical, {} logical, {} usable by this process",
                cpu.physical_cores, cpu.logical_cores, cpu.available_cores
            ),
        );

        text.section("RAM");
        text.row("total", &gib(self.ram.total_bytes));
        text.row("available", &gib(self.ram.available_bytes));

        text.section("NVIDIA GPUs (NVML)");
        if let Some(reason) = self.nvml.reason.as_deref().filter(|_| !self.nvml.available) {
            text.row("unavailable", reason);
        } else if self.gpus.is_empty() {
            text.row("none", "NVML answered but lists no GPU");
        }
        for gpu in &self.gpus {
            let mut figures = Vec::new();
            if let Some(bytes) = gpu.memory_total_bytes {
                figures.push(gib(bytes));
            }
            if let Some((major, minor)) = gpu.cuda_compute_capability {
                figures.push(format!("compute capability {major}.{minor}"));
            }
            if let Some(cores) = gpu.cores {
                figures.push(format!("{cores} CUDA cores"));
            }
            if let Some(mhz) = gpu.max_sm_clock_mhz {
                figures.push(format!("SM clock up to {mhz} MHz"));
            }
            if let Some(driver) = &gpu.driver_version {
                figures.push(format!("driver {driver}"));
            }
            // What CUDA calls it here, when CUDA_VISIBLE_DEVICES renumbers or hides it.
            match gpu.cuda_device {
                Some(ordinal) if ordinal != gpu.index => figures.push(format!("cuda:{ordinal}")),
                None if gpu.hidden_from_cuda => {
                    figures.push("hidden from CUDA (CUDA_VISIBLE_DEVICES)".to_owned());
                }
                _ => {}
            }
            let name = gpu.name.as_deref().unwrap_or("unnamed");
            text.row(
                &format!("GPU {}", gpu.index),
                &format!("{name}: {}", figures.join(", ")),
            );
        }

        text.section("Vulkan adapters (wgpu)");
        if let Some(reason) = self
            .vulkan
            .reason
            .as_deref()
            .filter(|_| !self.vulkan.available)
        {
            text.row("unavailable", reason);
        }
        for (index, adapter) in self.vulkan_adapters.iter().enumerate() {
            let mut details = vec![adapter.kind.name(), adapter.backend.as_str()];
            if !adapter.driver.is_empty() {
                details.push(&adapter.driver);
            }
            text.row(
                &format!("adapter {index}"),
                &format!("{} ({})", adapter.name, details.join(", ")),
            );
        }

        text.section("Burn backends");
        let backends = if self.burn_backends.is_empty() {
            "none named by the caller".to_owned()
        } else {
            self.burn_backends.join(", ")
        };
        text.row("built with", &backends);

        text.section("Recommendations");
        let advice = &self.recommendations;
        text.advice("preset", &advice.preset.value, &advice.preset.why);
        text.advice("precision", &advice.precision.value, &advice.precision.why);
        text.advice(
            "loader workers",
            &advice.loader_workers.value.to_string(),
            &advice.loader_workers.why,
        );
        let batch = &advice.batch.value;
        text.advice("batch size", &batch.advice, &advice.batch.why);
        text.0
    }
}

/// A report being written.
#[derive(Default)]
struct Text(String);

impl Text {
    fn section(&mut self, title: &str) {
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        self.0.push_str(title);
        self.0.push('\n');
    }

    /// `label` in the label column, `value` wrapped beside it.
    fn row(&mut self, label: &str, value: &str) {
        let lines = wrap(value, WIDTH - LABEL - 2);
        if lines.is_empty() {
            let _ = writeln!(self.0, "  {label}");
        }
        for (i, line) in lines.iter().enumerate() {
            let label = if i == 0 { label } else { "" };
            let _ = writeln!(self.0, "  {label:<LABEL$}{line}");
        }
    }

    fn advice(&mut self, label: &str, value: &str, why: &str) {
        self.row(label, value);
        self.row("", &format!("why: {why}"));
    }
}

/// Words of `text` in lines of at most `width` characters (a longer word gets its own line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::super::{DoctorOptions, doctor};
    use super::*;

    #[test]
    fn the_text_has_every_section_aligned() {
        let text = doctor(&DoctorOptions::new(["flex"])).to_text();
        for section in [
            "CPU\n",
            "RAM\n",
            "NVIDIA GPUs (NVML)\n",
            "Vulkan adapters (wgpu)\n",
            "Burn backends\n",
            "Recommendations\n",
        ] {
            assert!(text.contains(section), "{section:?} missing:\n{text}");
        }
        assert!(text.contains("why: "));
        for line in text.lines().filter(|line| line.starts_with("  ")) {
            assert!(line.chars().count() <= WIDTH, "too long: {line}");
            // Values start in one column.
            assert_eq!(line.chars().nth(LABEL + 1), Some(' '), "{line}");
        }
    }

    #[test]
    fn wrapping_keeps_words_whole() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("", 6), Vec::<String>::new());
        assert_eq!(wrap("longword", 4), ["longword"]);
    }
}
