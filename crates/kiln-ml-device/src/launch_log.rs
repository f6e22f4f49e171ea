//! Counting kernel launches: CubeCL's profiling logger at its minimal level writes one line per
//! launch, `Executing NAME`, to a file; [`LaunchLog`] reads it back.
//!
//! Burn and CubeCL expose no launch counter, but every kernel a CubeCL backend runs (fused ones
//! included) goes through the compute client's launch, which that logger sees. Turn it on with
//! [`GpuTuning::with_launch_log`](crate::GpuTuning::with_launch_log) before any GPU device
//! exists. It writes and flushes a line per launch from a logger thread, so it slows the host
//! down: count in a run that is not timed.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What CubeCL writes before a kernel's name for each launch (`cubecl-runtime`'s
/// `ServerLogger` at `ProfilingLogLevel::Minimal`).
const LAUNCH_PREFIX: &str = "Executing ";

/// A file of CubeCL launch lines, read from where the last count stopped.
#[derive(Debug)]
pub struct LaunchLog {
    path: PathBuf,
    offset: u64,
}

/// The launches between two marks of a [`LaunchLog`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launches {
    /// Kernel launches.
    pub count: u64,
    /// Launches per kernel name (CubeCL's short form of it), most frequent first.
    pub by_kernel: Vec<(String, u64)>,
}

impl LaunchLog {
    /// The log at `path` (it may not exist yet: CubeCL creates it at its first launch).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            offset: 0,
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Skips every launch logged so far (call it after a device sync, so that the launches
    /// queued before have reached the log).
    pub fn mark(&mut self) -> std::io::Result<()> {
        self.settle()?;
        // Past the last whole line: a line still being written counts in the next window.
        self.read_whole_lines(|_| {})
    }

    /// The launches logged since the last [`mark`](Self::mark) or count, then marks. Call it
    /// after a device sync: CubeCL's logger thread writes the lines shortly after the
    /// launches, so this waits until the file stops growing.
    pub fn count_since_mark(&mut self) -> std::io::Result<Launches> {
        self.settle()?;
        let mut launches = Launches::default();
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        self.read_whole_lines(|line| {
            if let Some(name) = line.trim_ascii_end().strip_prefix(LAUNCH_PREFIX.as_bytes()) {
                launches.count += 1;
                *counts
                    .entry(String::from_utf8_lossy(name).into_owned())
                    .or_default() += 1;
            }
        })?;
        launches.by_kernel = counts.into_iter().collect();
        launches
            .by_kernel
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(launches)
    }

    /// Hands every whole line after the offset to `each`, as bytes (a mark decodes nothing),
    /// and moves the offset past them; a last line without its end is still being written and
    /// is left for next time.
    fn read_whole_lines(&mut self, mut each: impl FnMut(&[u8])) -> std::io::Result<()> {
        let Ok(file) = std::fs::File::open(&self.path) else {
            return Ok(());
        };
        let mut reader = BufReader::new(file);
        reader.seek(SeekFrom::Start(self.offset))?;
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line)?;
            if read == 0 || line.last() != Some(&b'\n') {
                return Ok(());
            }
            self.offset += read as u64;
            each(&line);
        }
    }

    fn len(&self) -> std::io::Result<u64> {
        match std::fs::metadata(&self.path) {
            Ok(metadata) => Ok(metadata.len()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(error),
        }
    }

    /// Waits (at most 2 s) until the file has not grown for 50 ms: the logger thread has
    /// written what was sent to it.
    fn settle(&self) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = self.len()?;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = self.len()?;
            if now == last || Instant::now() > deadline {
                return Ok(());
            }
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn counts_the_launch_lines_written_since_the_mark() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("launches.log");
        let mut log = LaunchLog::new(&path);
        // No file yet: no launch.
        assert_eq!(log.count_since_mark().unwrap().count, 0);

        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "Executing elemwise_fuse").unwrap();
        writeln!(file, "Compiling something").unwrap();
        log.mark().unwrap();
        for name in ["reduce", "elemwise_fuse", "reduce"] {
            writeln!(file, "Executing {name}").unwrap();
        }
        let launches = log.count_since_mark().unwrap();
        assert_eq!(launches.count, 3);
        assert_eq!(
            launches.by_kernel,
            [("reduce".to_owned(), 2), ("elemwise_fuse".to_owned(), 1)]
        );
        // Counted lines are not counted again.
        writeln!(file, "Executing slice_assign").unwrap();
        assert_eq!(log.count_since_mark().unwrap().count, 1);
        // A line caught half written counts once it is whole, under its whole name.
        write!(file, "Executing matmul\nExecuting elem").unwrap();
        let launches = log.count_since_mark().unwrap();
        assert_eq!(launches.by_kernel, [("matmul".to_owned(), 1)]);
        writeln!(file, "wise_fuse").unwrap();
        let launches = log.count_since_mark().unwrap();
        assert_eq!(launches.by_kernel, [("elemwise_fuse".to_owned(), 1)]);
        // A mark taken while a line is half written leaves that line to the next count.
        write!(file, "Executing slice").unwrap();
        log.mark().unwrap();
        writeln!(file, "_assign").unwrap();
        let launches = log.count_since_mark().unwrap();
        assert_eq!(launches.by_kernel, [("slice_assign".to_owned(), 1)]);
    }
}
