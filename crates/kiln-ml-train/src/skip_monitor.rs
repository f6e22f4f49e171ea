//! Watches the rate of skipped optimizer steps and warns when it is unhealthy.

use std::collections::VecDeque;

/// Settings of the skipped-step warning.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkipWarningConfig {
    /// Steps looked back over. Default 100.
    pub window_steps: u32,
    /// Warn when more than this fraction of the window was skipped. Default 0.05.
    pub max_skip_fraction: f64,
    /// Steps at the start of the run during which skips are expected while the loss scale
    /// calibrates (PyTorch's docs say so too). Default 100.
    pub warmup_steps: u64,
}

impl Default for SkipWarningConfig {
    fn default() -> Self {
        Self {
            window_steps: 100,
            max_skip_fraction: 0.05,
            warmup_steps: 100,
        }
    }
}

/// Why the monitor warned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SkipWarning {
    /// Too many of the recent steps were skipped.
    HighSkipRate {
        /// Skipped steps in the window.
        skipped: u32,
        /// Steps in the window.
        window: u32,
    },
    /// The loss scale fell below 1: gradients are overflowing even unscaled.
    ScaleBelowOne {
        /// The scale.
        scale: f32,
    },
}

impl std::fmt::Display for SkipWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipWarning::HighSkipRate { skipped, window } => write!(
                f,
                "{skipped} of the last {window} optimizer steps were skipped for inf/NaN gradients"
            ),
            SkipWarning::ScaleBelowOne { scale } => write!(
                f,
                "the loss scale fell to {scale}: gradients overflow f16 even unscaled"
            ),
        }
    }
}

/// Counts skipped steps over a sliding window; reports each unhealthy episode once.
#[derive(Debug, Clone)]
pub(crate) struct SkipMonitor {
    config: SkipWarningConfig,
    recent: VecDeque<bool>,
    steps: u64,
    /// The rate is not judged up to this step: the warm-up, or the refill of the window after
    /// a resume.
    quiet_until: u64,
    warned_rate: bool,
    warned_scale: bool,
}

impl SkipMonitor {
    /// A monitor with no history.
    pub fn new(config: SkipWarningConfig) -> Self {
        Self {
            config,
            recent: VecDeque::with_capacity(config.window_steps as usize),
            steps: 0,
            quiet_until: config.warmup_steps,
            warned_rate: false,
            warned_scale: false,
        }
    }

    /// A monitor for a run resumed after optimizer step `steps`, whose window was not saved.
    ///
    /// The warm-up counts from the start of the run (the loss scale is restored, so it does
    /// not calibrate again), and the rate is judged once the window has refilled with steps
    /// taken after the resume: a window of a few steps would call one skip a high rate.
    pub fn resumed_after(config: SkipWarningConfig, steps: u64) -> Self {
        let refilled = steps.saturating_add(u64::from(config.window_steps).saturating_sub(1));
        Self {
            steps,
            quiet_until: config.warmup_steps.max(refilled),
            ..Self::new(config)
        }
    }

    /// Records one optimizer step; returns a warning when an unhealthy episode begins.
    pub fn record(&mut self, skipped: bool, loss_scale: Option<f32>) -> Option<SkipWarning> {
        self.steps += 1;
        if self.recent.len() == self.config.window_steps as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(skipped);
        if let Some(scale) = loss_scale {
            if scale < 1.0 && !self.warned_scale {
                self.warned_scale = true;
                return Some(SkipWarning::ScaleBelowOne { scale });
            }
            if scale >= 1.0 {
                self.warned_scale = false;
            }
        }
        if self.steps <= self.quiet_until {
            return None;
        }
        let skipped_in_window = self.recent.iter().filter(|&&s| s).count() as u32;
        let window = self.recent.len() as u32;
        let high = f64::from(skipped_in_window) > self.config.max_skip_fraction * f64::from(window);
        if high && !self.warned_rate {
            self.warned_rate = true;
            return Some(SkipWarning::HighSkipRate {
                skipped: skipped_in_window,
                window,
            });
        }
        if !high {
            self.warned_rate = false;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor() -> SkipMonitor {
        SkipMonitor::new(SkipWarningConfig {
            window_steps: 10,
            max_skip_fraction: 0.2,
            warmup_steps: 5,
        })
    }

    #[test]
    fn quiet_during_warmup_then_warns_once_per_episode() {
        let mut monitor = monitor();
        for _ in 0..5 {
            assert_eq!(
                monitor.record(true, None),
                None,
                "warm-up skips are expected"
            );
        }
        // 6 of the last 6 skipped: warn once.
        assert!(matches!(
            monitor.record(true, None),
            Some(SkipWarning::HighSkipRate {
                skipped: 6,
                window: 6
            })
        ));
        assert_eq!(monitor.record(true, None), None);
        for _ in 0..10 {
            monitor.record(false, None);
        }
        // A new episode warns again.
        monitor.record(true, None);
        monitor.record(true, None);
        assert!(monitor.record(true, None).is_some());
    }

    #[test]
    fn a_resumed_run_is_not_warmed_up_again_and_judges_a_refilled_window() {
        let config = SkipWarningConfig {
            window_steps: 10,
            max_skip_fraction: 0.2,
            warmup_steps: 5,
        };
        // Resumed after step 40: a skip on the first steps is one of too few to judge.
        let mut monitor = SkipMonitor::resumed_after(config, 40);
        for step in 41..=49 {
            assert_eq!(monitor.record(true, None), None, "step {step}");
        }
        // Step 50: the window holds the 10 steps since the resume, all skipped.
        assert!(matches!(
            monitor.record(true, None),
            Some(SkipWarning::HighSkipRate {
                skipped: 10,
                window: 10
            })
        ));

        // Resumed inside the warm-up: quiet until the warm-up or the refill ends, whichever
        // is later (here the refill: steps 3..=12).
        let mut monitor = SkipMonitor::resumed_after(config, 2);
        for _ in 3..=11 {
            assert_eq!(monitor.record(true, None), None);
        }
        assert!(monitor.record(true, None).is_some());
    }

    #[test]
    fn a_scale_below_one_warns_even_in_warmup() {
        let mut monitor = monitor();
        assert_eq!(monitor.record(true, Some(2.0)), None);
        let warning = monitor.record(true, Some(0.5)).unwrap();
        assert!(warning.to_string().contains("0.5"), "{warning}");
        assert_eq!(monitor.record(true, Some(0.25)), None);
    }
}
