//! The loader's persistent worker threads: a FIFO queue, and urgent jobs first.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::{Error, Result};

/// A unit of work: reading a block or collating a batch. Jobs answer through a
/// [`Reply`](super::reply::Reply), which reports a panic anywhere in the job as an error (and
/// answers even for a job dropped unrun); the pool only keeps its workers alive.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

enum Message {
    Run(Job),
    /// An urgent job was submitted: a worker idle in `recv` goes and takes it.
    Wake,
    Stop,
}

/// Where jobs are submitted: a FIFO queue, and an urgent one that workers serve first. The
/// reads for every prefetched batch and `read_ahead_blocks` more may be queued; the collation
/// of a batch the consumer waits for should not wait behind them.
#[derive(Clone, Debug)]
pub(crate) struct Jobs {
    queue: Sender<Message>,
    urgent: Sender<Job>,
}

impl Jobs {
    /// Queues a job behind those queued before it.
    pub(crate) fn queue(&self, job: Job) {
        let _ = self.queue.send(Message::Run(job));
    }

    /// Jobs (and wake-ups) waiting in the FIFO queue: how far the workers are behind.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues a job ahead of every job in the FIFO queue.
    pub(crate) fn urgent(&self, job: Job) {
        let _ = self.urgent.send(job);
        // Busy workers look at the urgent queue before their next job; this wakes an idle one.
        let _ = self.queue.send(Message::Wake);
    }
}

/// Threads that live as long as the loader and run jobs, urgent ones first.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    queue: Sender<Message>,
    urgent: Sender<Job>,
    handles: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub(crate) fn new(workers: usize) -> Result<Self> {
        let (queue, queued) = unbounded::<Message>();
        let (urgent, urgent_queued) = unbounded::<Job>();
        let mut pool = Self {
            queue,
            urgent,
            handles: Vec::with_capacity(workers),
        };
        for index in 0..workers {
            let queued = queued.clone();
            let urgent_queued = urgent_queued.clone();
            let what = format!("kiln-ml-data loader worker {index}");
            let handle = std::thread::Builder::new()
                .name(what.clone())
                .spawn(move || work(&urgent_queued, &queued))
                .map_err(|source| Error::Thread { what, source })?;
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// A handle for submitting jobs.
    pub(crate) fn jobs(&self) -> Jobs {
        Jobs {
            queue: self.queue.clone(),
            urgent: self.urgent.clone(),
        }
    }
}

/// Runs urgent jobs first, then queued ones. Waiting happens on the FIFO queue alone (a plain
/// `recv`): selecting over both queues for every job measurably lowered the loader's throughput
/// on 2 cores, where an epoch is tens of thousands of short jobs (commit 68c4b72).
fn work(urgent: &Receiver<Job>, queue: &Receiver<Message>) {
    loop {
        if let Ok(job) = urgent.try_recv() {
            run(job);
            continue;
        }
        match queue.recv() {
            Ok(Message::Run(job)) => run(job),
            Ok(Message::Wake) => {}
            Ok(Message::Stop) | Err(_) => {
                // Urgent jobs submitted meanwhile still run, as queued ones did.
                urgent.try_iter().for_each(run);
                return;
            }
        }
    }
}

fn run(job: Job) {
    // A job that panics past its own guard must not take the worker with it; its reply has
    // answered for it by then.
    let _ = catch_unwind(AssertUnwindSafe(job));
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // One stop message per worker, behind any queued jobs (urgent ones go first anyway);
        // explicit messages (rather than disconnected channels) so a forgotten epoch holding a
        // sender cannot keep threads alive.
        for _ in &self.handles {
            let _ = self.queue.send(Message::Stop);
        }
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn runs_every_job_and_survives_panics() {
        let done = Arc::new(AtomicUsize::new(0));
        {
            let pool = WorkerPool::new(3).unwrap();
            assert_eq!(pool.handles.len(), 3);
            let jobs = pool.jobs();
            for index in 0..20 {
                let done = Arc::clone(&done);
                let job: Job = Box::new(move || {
                    if index == 5 {
                        panic!("job 5 fails");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
                if index % 2 == 0 {
                    jobs.queue(job);
                } else {
                    jobs.urgent(job);
                }
            }
            // Dropping the pool drains both queues, then joins.
        }
        assert_eq!(done.load(Ordering::Relaxed), 19);
    }

    #[test]
    fn an_urgent_job_wakes_an_idle_worker() {
        let pool = WorkerPool::new(1).unwrap();
        // Let the worker go idle in `recv` first.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (done, finished) = crossbeam_channel::bounded(1);
        pool.jobs().urgent(Box::new(move || {
            let _ = done.send(());
        }));
        // Without the wake-up it would run only when the pool drops, after this times out.
        let ran = finished.recv_timeout(std::time::Duration::from_secs(10));
        assert!(
            ran.is_ok(),
            "the urgent job did not run while the pool was alive"
        );
    }

    #[test]
    fn urgent_jobs_run_before_queued_ones() {
        let pool = WorkerPool::new(1).unwrap();
        let jobs = pool.jobs();
        let order = Arc::new(Mutex::new(Vec::new()));
        // Keep the only worker busy while the queues fill.
        let (release, wait) = crossbeam_channel::bounded::<()>(0);
        jobs.queue(Box::new(move || {
            let _ = wait.recv();
        }));
        let record = |label: &'static str| -> Job {
            let order = Arc::clone(&order);
            Box::new(move || order.lock().unwrap().push(label))
        };
        for _ in 0..3 {
            jobs.queue(record("queued"));
        }
        jobs.urgent(record("urgent"));
        release.send(()).unwrap();
        drop(pool);
        assert_eq!(
            *order.lock().unwrap(),
            ["urgent", "queued", "queued", "queued"]
        );
    }
}
