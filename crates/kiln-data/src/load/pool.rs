//! The loader's persistent worker threads.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::{Error, Result};

/// A unit of work: reading a block or collating a batch. Jobs catch their own panics and
/// report them as errors; the pool only guards itself against bugs.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

pub(crate) enum Message {
    Run(Job),
    Stop,
}

/// Threads that live as long as the loader and run jobs in FIFO order.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    jobs: Sender<Message>,
    handles: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub(crate) fn new(workers: usize) -> Result<Self> {
        let (jobs, queue) = unbounded::<Message>();
        let mut pool = Self {
            jobs,
            handles: Vec::with_capacity(workers),
        };
        for index in 0..workers {
            let queue: Receiver<Message> = queue.clone();
            let what = format!("kiln-data loader worker {index}");
            let handle = std::thread::Builder::new()
                .name(what.clone())
                .spawn(move || work(&queue))
                .map_err(|source| Error::Thread { what, source })?;
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// A handle for submitting jobs.
    pub(crate) fn sender(&self) -> Sender<Message> {
        self.jobs.clone()
    }
}

fn work(queue: &Receiver<Message>) {
    while let Ok(Message::Run(job)) = queue.recv() {
        // A job that panics past its own guard must not take the worker with it.
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // One stop message per worker, behind any queued jobs; explicit messages (rather than a
        // disconnected channel) so a forgotten epoch holding a sender cannot keep threads alive.
        for _ in &self.handles {
            let _ = self.jobs.send(Message::Stop);
        }
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn runs_every_job_and_survives_panics() {
        let done = Arc::new(AtomicUsize::new(0));
        {
            let pool = WorkerPool::new(3).unwrap();
            assert_eq!(pool.handles.len(), 3);
            let jobs = pool.sender();
            for index in 0..20 {
                let done = Arc::clone(&done);
                let job: Job = Box::new(move || {
                    if index == 5 {
                        panic!("job 5 fails");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
                jobs.send(Message::Run(job)).unwrap();
            }
            // Dropping the pool drains the queue, then joins.
        }
        assert_eq!(done.load(Ordering::Relaxed), 19);
    }
}
