//! Trials in child processes: each trial starts a fresh process, so whatever a failed
//! allocation leaves behind (a poisoned device, a fragmented pool, an aborted CPU allocator)
//! dies with it. PyTorch users learned that in-process recovery is unreliable
//! (pytorch/pytorch #18853, #82218).
//!
//! The protocol: the parent runs the command with [`TRIAL_ENV`] set to the trial's request
//! (JSON); the child's `main` calls [`serve_child_trial`] first, which runs the trial and
//! prints one line, [`RESULT_PREFIX`] followed by the outcome as JSON, and exits.

use std::fmt::Display;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::out_of_memory::is_out_of_memory;
use super::trial::{Outcome, run_in_process};
use crate::{Error, MemoryProbe, Result};

/// The environment variable that carries a trial's request to the child.
pub const TRIAL_ENV: &str = "KILN_PROFILE_TRIAL";

/// The start of the child's answer line on its standard output.
pub const RESULT_PREFIX: &str = "KILN_PROFILE_TRIAL_RESULT ";

/// What the parent asks the child to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Request {
    batch_size: usize,
    steps: usize,
    budget_bytes: Option<u64>,
}

/// The command a finder in child mode runs for each trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildCommand {
    /// The program: by default this very executable.
    pub program: PathBuf,
    /// Its arguments: by default this process's own.
    pub args: Vec<String>,
    /// A trial running longer than this is killed and reported as a failure (`Duration::MAX`:
    /// never). Only `program`'s
    /// own process is killed: run the trial program itself, not through a wrapper (a shell,
    /// `cargo run`), whose children would outlive the timeout.
    pub timeout: Duration,
}

impl ChildCommand {
    /// This executable with this process's arguments (the usual case: the program's `main`
    /// calls [`serve_child_trial`] before doing anything else), and a 10-minute timeout.
    pub fn this_program() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            args: std::env::args_os()
                .skip(1)
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect(),
            timeout: Duration::from_secs(600),
        })
    }
}

/// When this process was started by a batch-size finder for one trial, runs it with `trial`
/// (given the batch size and the number of steps), prints the outcome for the parent and
/// exits. Otherwise returns at once. Call it first thing in `main`, before anything allocates
/// device memory. `probe` measures the trial's peak memory for the parent's budget.
pub fn serve_child_trial<E: Display>(
    probe: Option<&dyn MemoryProbe>,
    mut trial: impl FnMut(usize, usize) -> std::result::Result<(), E>,
) {
    let Ok(request) = std::env::var(TRIAL_ENV) else {
        return;
    };
    let outcome = match serde_json::from_str::<Request>(&request) {
        Ok(Request {
            budget_bytes: Some(_),
            ..
        }) if probe.is_none() => Outcome::Failed {
            message: "the parent set a memory budget, but the child has no memory probe to \
                      measure the trial's peak: pass one to serve_child_trial"
                .to_owned(),
        },
        Ok(request) => run_in_process(
            &mut trial,
            request.batch_size,
            request.steps,
            probe,
            request.budget_bytes,
        ),
        Err(error) => Outcome::Failed {
            message: format!("unreadable {TRIAL_ENV}={request:?}: {error}"),
        },
    };
    let line = serde_json::to_string(&outcome).unwrap_or_else(|error| {
        format!(r#"{{"outcome":"failed","message":"cannot encode the outcome: {error}"}}"#)
    });
    let mut stdout = std::io::stdout().lock();
    // On a line of its own, whatever was printed before.
    let _ = writeln!(stdout, "\n{RESULT_PREFIX}{line}");
    let _ = stdout.flush();
    std::process::exit(0);
}

/// Runs one trial in a child process and reads its outcome.
pub(crate) fn run_in_child(
    command: &ChildCommand,
    batch_size: usize,
    steps: usize,
    budget_bytes: Option<u64>,
) -> Result<Outcome> {
    let child_error = |message: String| Error::Child {
        batch_size,
        message,
    };
    let request = serde_json::to_string(&Request {
        batch_size,
        steps,
        budget_bytes,
    })
    .map_err(|error| child_error(format!("could not encode its request: {error}")))?;
    let mut child = Command::new(&command.program)
        .args(&command.args)
        .env(TRIAL_ENV, request)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| {
            child_error(format!(
                "could not start {}: {error}",
                command.program.display()
            ))
        })?;
    // Drained on their own threads so a chatty child never blocks on a full pipe.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    // A timeout past what an instant can hold (`Duration::MAX`) is no deadline.
    let deadline = Instant::now().checked_add(command.timeout);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if deadline.is_some_and(|deadline| Instant::now() >= deadline) => {
                let _ = child.kill();
                let _ = child.wait();
                // The pipes close with the child, so the drains end, unless a process it
                // started holds them open (a wrapper's): then they are left to end on their own.
                stdout.finish();
                stderr.finish();
                return Err(child_error(format!(
                    "ran longer than {:?} and was killed",
                    command.timeout
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(child_error(format!("could not be waited for: {error}")));
            }
        }
    };
    // As after a kill: a process the child started may hold the pipes open after it exited
    // with its answer written; what was read by then is the answer.
    let stdout = stdout.finish();
    let stderr = stderr.finish();
    // Anywhere in a line (a test harness may have printed on the same line first); the last
    // such line is the answer.
    let answer = stdout.lines().rev().find_map(|line| {
        line.find(RESULT_PREFIX)
            .map(|start| &line[start + RESULT_PREFIX.len()..])
    });
    if let Some(line) = answer {
        return serde_json::from_str(line)
            .map_err(|error| child_error(format!("answered {line:?}: {error}")));
    }
    let tail: String = stderr
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    // No answer: an allocator abort (its message is the last thing printed) or the kernel's
    // OOM killer (SIGKILL) is out of memory; an earlier log line mentioning memory is not.
    if is_out_of_memory(&tail) || killed_by_sigkill(&status) {
        return Ok(Outcome::OutOfMemory {
            peak_bytes: None,
            reason: format!("the child process died ({status}): {tail}"),
        });
    }
    Err(child_error(format!(
        "exited ({status}) without an answer; did its main call serve_child_trial first? \
         stderr: {tail}"
    )))
}

/// How long a killed child's pipes may stay open before the parent stops waiting for them.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// The thread's result if it ends within `grace`; `None` (and the thread left to end by
/// itself) otherwise.
fn join_within<T>(handle: std::thread::JoinHandle<T>, grace: Duration) -> Option<T> {
    let deadline = Instant::now() + grace;
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.join().ok()
}

/// A pipe read to its end on a thread of its own, keeping what it read so far.
struct Drain {
    read: Arc<Mutex<Vec<u8>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Drain {
    /// What the pipe gave: all of it once it closes, or what it gave within [`PIPE_GRACE`]
    /// while another process holds it open (the thread is left to end with that process).
    fn finish(self) -> String {
        let _ = join_within(self.thread, PIPE_GRACE);
        let read = self
            .read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        String::from_utf8_lossy(&read).into_owned()
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> Drain {
    let read = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&read);
    let thread = std::thread::spawn(move || {
        let Some(mut pipe) = pipe else { return };
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(bytes) => kept
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .extend_from_slice(&chunk[..bytes]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    Drain { read, thread }
}

#[cfg(unix)]
fn killed_by_sigkill(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

#[cfg(not(unix))]
fn killed_by_sigkill(_status: &std::process::ExitStatus) -> bool {
    false
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    fn shell(script: &str) -> ChildCommand {
        ChildCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".to_owned(), script.to_owned()],
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn reads_the_answer_line_and_passes_the_request() {
        let command = shell(
            r#"printf 'test x ... '; case "$KILN_PROFILE_TRIAL" in *'"batch_size":8'*) echo 'KILN_PROFILE_TRIAL_RESULT {"outcome":"fits","peak_bytes":42}';; *) echo 'KILN_PROFILE_TRIAL_RESULT {"outcome":"failed","message":"wrong request"}';; esac"#,
        );
        let outcome = run_in_child(&command, 8, 3, Some(100)).unwrap();
        assert_eq!(
            outcome,
            Outcome::Fits {
                peak_bytes: Some(42)
            }
        );
        // No deadline at all: no overflow of the clock.
        let mut patient = command;
        patient.timeout = Duration::MAX;
        assert!(matches!(
            run_in_child(&patient, 8, 3, Some(100)).unwrap(),
            Outcome::Fits { .. }
        ));
    }

    #[test]
    fn an_allocator_abort_is_out_of_memory_and_silence_is_an_error() {
        let abort =
            shell("echo 'memory allocation of 1099511627776 bytes failed' >&2; kill -ABRT $$");
        assert!(matches!(
            run_in_child(&abort, 4, 3, None).unwrap(),
            Outcome::OutOfMemory { .. }
        ));
        let killed = shell("kill -KILL $$");
        assert!(matches!(
            run_in_child(&killed, 4, 3, None).unwrap(),
            Outcome::OutOfMemory { .. }
        ));
        // A crash long after a log line that mentions memory is a crash, not out of memory.
        let crash = shell(
            "echo 'warning: failed to allocate a staging buffer, retrying' >&2; \
             for i in 1 2 3 4 5 6; do echo step $i >&2; done; exit 101",
        );
        let error = run_in_child(&crash, 4, 3, None).unwrap_err().to_string();
        assert!(error.contains("without an answer"), "{error}");
        let silent = shell("echo something else; exit 3");
        let error = run_in_child(&silent, 4, 3, None).unwrap_err().to_string();
        assert!(error.contains("without an answer"), "{error}");
        let mut slow = shell("sleep 5");
        slow.timeout = Duration::from_millis(200);
        let error = run_in_child(&slow, 4, 3, None).unwrap_err().to_string();
        assert!(error.contains("killed"), "{error}");
    }

    /// A child that answers and exits while a process it started holds stdout open: its answer
    /// is read within the grace period, not after that process ends.
    #[test]
    fn an_answer_is_read_while_a_grandchild_holds_the_pipe() {
        let command = shell(
            r#"sleep 20 & echo 'KILN_PROFILE_TRIAL_RESULT {"outcome":"fits","peak_bytes":7}'"#,
        );
        let started = Instant::now();
        let outcome = run_in_child(&command, 8, 3, None).unwrap();
        assert_eq!(
            outcome,
            Outcome::Fits {
                peak_bytes: Some(7)
            }
        );
        // Not a speed bound: without the grace period the parent waits out the grandchild.
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_grandchild_holding_the_pipes_does_not_hold_the_parent() {
        // A wrapper whose child outlives it keeps stdout open for 20 s after the kill.
        let mut wrapper = shell("sleep 20 & sleep 20");
        wrapper.timeout = Duration::from_millis(200);
        let started = Instant::now();
        let error = run_in_child(&wrapper, 4, 3, None).unwrap_err().to_string();
        assert!(error.contains("killed"), "{error}");
        // Not a speed bound: without the grace period the parent waits out the grandchild.
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
    }
}
