//! The first optimizer step of a `fit`: its time, and a notice while it takes long.
//!
//! On a GPU backend the first step compiles every kernel the model needs (seconds on a cold
//! cache; minutes where Burn's autotuning is compiled in, which compiles and times every
//! candidate matrix-product kernel), so a user may stare at a silent terminal. A
//! watcher thread prints, after a delay and then at the same interval, how long the step has
//! run, which phase it is in, and whether the process is busy on the CPU meanwhile (compiling
//! and tuning) or idle (waiting on the device: a stall, if it lasts).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln_ml_core::Phase;

/// Shared between the training thread and the watcher.
struct Shared {
    done: Mutex<bool>,
    wake: Condvar,
    /// The phase the training thread is in (an index into [`Phase::ALL`]), or [`NO_PHASE`].
    phase: AtomicU8,
}

const NO_PHASE: u8 = u8::MAX;

/// Watches one `fit` until its first optimizer step ends.
pub(crate) struct FirstStepWatch {
    started: Instant,
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
}

impl FirstStepWatch {
    /// Starts the clock; with `notice_after`, a watcher that prints a notice on stderr every
    /// `notice_after` until the step ends. `device` names the device in the notice.
    pub(crate) fn start(notice_after: Option<Duration>, device: String) -> Self {
        let started = Instant::now();
        let shared = Arc::new(Shared {
            done: Mutex::new(false),
            wake: Condvar::new(),
            phase: AtomicU8::new(NO_PHASE),
        });
        let watcher = notice_after
            .filter(|after| !after.is_zero())
            .and_then(|after| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("kiln-first-step".to_owned())
                    .spawn(move || watch(&shared, started, after, &device))
                    .ok()
            });
        Self {
            started,
            shared,
            watcher,
        }
    }

    /// Records the phase the training thread enters, for the notice.
    pub(crate) fn enter(&self, phase: Phase) {
        let index = Phase::ALL
            .iter()
            .position(|known| *known == phase)
            .map_or(NO_PHASE, |index| index as u8);
        self.shared.phase.store(index, Ordering::Relaxed);
    }

    /// Stops the watcher; returns the time since [`start`](Self::start).
    pub(crate) fn finish(mut self) -> Duration {
        let elapsed = self.started.elapsed();
        self.stop();
        elapsed
    }

    fn stop(&mut self) {
        *self
            .shared
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

impl Drop for FirstStepWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The watcher's loop: a notice every `every` until `done`.
fn watch(shared: &Shared, started: Instant, every: Duration, device: &str) {
    let cpu_at_start = process_cpu_time();
    let mut deadline = started + every;
    let mut done = shared
        .done
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        let now = Instant::now();
        if *done {
            return;
        }
        if now < deadline {
            done = shared
                .wake
                .wait_timeout(done, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
            continue;
        }
        let phase = Phase::ALL
            .get(usize::from(shared.phase.load(Ordering::Relaxed)))
            .map_or("setup", |phase| phase.name());
        let cpu = process_cpu_time()
            .zip(cpu_at_start)
            .map(|(now, then)| now.saturating_sub(then));
        eprintln!("{}", notice(device, started.elapsed(), phase, cpu));
        if let Some(log) = kiln_ml_core::kernel_log()
            && let Some(line) = last_line(log)
        {
            eprintln!(
                "kiln-ml-train: last kernel activity ({}): {line}",
                log.display()
            );
        }
        deadline += every;
    }
}

/// The notice's text.
pub(crate) fn notice(
    device: &str,
    elapsed: Duration,
    phase: &str,
    cpu: Option<Duration>,
) -> String {
    let seconds = elapsed.as_secs_f64();
    let head = format!(
        "kiln-ml-train: the first optimizer step has run for {seconds:.0} s on {device} (now in \
         its {phase} phase)"
    );
    let Some(cpu) = cpu else {
        return format!("{head}; on a GPU backend it compiles every kernel first.");
    };
    let cores = cpu.as_secs_f64() / seconds.max(1e-9);
    let verdict = if cores >= 0.5 {
        "the host is busy: most likely compiling kernels (cached for later runs)"
    } else if cores >= 0.1 {
        "the host is partly busy: compiling kernels, or waiting on the device in between"
    } else {
        "the host is idle: waiting on the device; if this lasts, the step is stalled (see \
         docs/performance.md, 'time to first step')"
    };
    format!(
        "{head}; the process used {:.1} s of CPU meanwhile ({:.0}% of a core): {verdict}.",
        cpu.as_secs_f64(),
        100.0 * cores
    )
}

/// The last non-empty line of `path` (read from its last 4 KiB), cut to 200 characters.
fn last_line(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(4096)))
        .ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().find(|line| !line.trim().is_empty())?;
    Some(line.trim().chars().take(200).collect())
}

/// The CPU time this process has used (user + system), where the platform says.
fn process_cpu_time() -> Option<Duration> {
    // /proc/self/stat: fields 14 and 15 are utime and stime in clock ticks (100 per second on
    // Linux, whatever the kernel's HZ). The command name (field 2) may hold spaces: skip past
    // its closing parenthesis.
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    // Field 3 (state) is index 0 after the name.
    let total = ticks(11)? + ticks(12)?;
    Some(Duration::from_millis(total * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_tells_busy_from_idle() {
        let minute = Duration::from_secs(60);
        let busy = notice("cuda:0", minute, "forward", Some(Duration::from_secs(58)));
        assert!(busy.contains("busy") && busy.contains("forward"), "{busy}");
        assert!(busy.contains("60 s on cuda:0"), "{busy}");
        let idle = notice("cuda:0", minute, "backward", Some(Duration::from_secs(1)));
        assert!(idle.contains("idle") && idle.contains("stalled"), "{idle}");
        let unknown = notice("cuda:0", minute, "setup", None);
        assert!(unknown.contains("compiles"), "{unknown}");
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let Some(before) = process_cpu_time() else {
            return; // not Linux
        };
        // Spin until the kernel has counted at least one more tick (bounded in wall time).
        let give_up = Instant::now() + Duration::from_secs(30);
        let mut sum = 0u64;
        let mut after = before;
        while after <= before && Instant::now() < give_up {
            for _ in 0..100_000 {
                sum = sum.wrapping_add(std::hint::black_box(sum) ^ 7);
            }
            after = process_cpu_time().expect("read once already");
        }
        std::hint::black_box(sum);
        assert!(after > before, "{before:?} -> {after:?}");
    }

    #[test]
    fn the_last_line_of_a_log_is_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kernels.log");
        let mut text = "x".repeat(10_000);
        text.push_str("\n[Compiling kernel] matmul_cmma\n\n");
        std::fs::write(&log, text).unwrap();
        assert_eq!(
            last_line(&log).as_deref(),
            Some("[Compiling kernel] matmul_cmma")
        );
        assert_eq!(last_line(&dir.path().join("missing")), None);
    }

    #[test]
    fn finishing_stops_the_watcher_and_reports_the_time_since_the_start() {
        // Finishing wakes the watcher long before its first notice is due and joins it (were
        // the wake-up lost, this test would hang instead of passing).
        let watch = FirstStepWatch::start(Some(Duration::from_secs(3600)), "test".to_owned());
        watch.enter(Phase::Forward);
        std::thread::sleep(Duration::from_millis(5));
        let elapsed = watch.finish();
        assert!(elapsed >= Duration::from_millis(5), "{elapsed:?}");
    }
}
