//! The bound on how far the host runs ahead of the device, without draining the device's queue.
//!
//! Some optimizer steps that read nothing back start an asynchronous read of their loss (one
//! value) right after they are queued; the read lands in the device's queue behind that step's
//! work. Once `max_queued_steps` steps are queued past the last step known to have finished, the
//! host waits for the oldest read within those steps: for that step to finish, while the later
//! ones stay queued. The device never runs dry between steps (a device sync would empty its
//! queue, and the host would then queue the next step onto an idle device, which is what hides
//! launch latency lost), and the host never gets more than the bound ahead. CUDA's launch queue
//! gives PyTorch the same bound.
//!
//! Reading costs host time (on an H200 a step bounded at 2 took 0.37-0.92 ms longer than an
//! unbounded one, which starts no read; docs/performance.md), so only every
//! `max(1, max_queued_steps / 2)`-th step starts one: with a bound of 2 every step reads
//! and waits for the one before it; with 8, every 4th step reads, and the queue stays between
//! 4 and 8 steps deep.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

/// A read of one step's loss, started when the step was queued.
type LossRead = Pin<Box<dyn Future<Output = Result<TensorData, String>> + Send>>;

/// A started read: still in flight, or already done (a backend that reads synchronously).
enum Started {
    InFlight(LossRead),
    Done(Result<(), String>),
}

/// The steps queued on the device since it was last known idle, and the reads that tell when
/// some of them ended.
pub(crate) struct RunAhead {
    /// The reads in flight, oldest first, each with the number of the step it was started for.
    reads: VecDeque<(u64, Started)>,
    /// Steps queued since the last `settle` (the first is step 1).
    queued: u64,
    /// The last of those steps known to have finished (0: none yet).
    finished: u64,
}

impl RunAhead {
    pub(crate) fn new() -> Self {
        Self {
            reads: VecDeque::new(),
            queued: 0,
            finished: 0,
        }
    }

    /// Waits for every queued step, before a readback that waits for all of them anyway. A
    /// started read is always finished, never dropped: Burn's wgpu runtime maps a staging
    /// buffer for it, and a buffer handed back while its mapping is pending breaks the next
    /// read that gets it.
    pub(crate) fn settle(&mut self) -> Result<(), String> {
        self.queued = 0;
        self.finished = 0;
        while let Some((_, started)) = self.reads.pop_front() {
            finish(started)?;
        }
        Ok(())
    }

    /// Records a step just queued, whose loss is `loss`, and, when `limit` steps are now queued
    /// past the last one known to have finished, waits for the oldest read within the last
    /// `limit` steps. Returns whether it waited. 0 never waits; 1 waits for this very step (a
    /// sync per step).
    pub(crate) fn queued<B: Backend>(
        &mut self,
        loss: Tensor<B, 1>,
        limit: u64,
    ) -> Result<bool, String> {
        if limit == 0 {
            return Ok(false);
        }
        self.queued += 1;
        let step = self.queued;
        if step.is_multiple_of(read_stride(limit)) {
            self.reads.push_back((step, start_read(loss)));
        }
        if step - self.finished < limit {
            return Ok(false);
        }
        // A read was started within the last `limit` steps: reads are `read_stride(limit)`
        // apart, which is at most `limit`.
        let oldest_allowed = step + 1 - limit;
        loop {
            let (read_step, started) = self
                .reads
                .pop_front()
                .expect("a read within the last `limit` steps");
            finish(started)?;
            if read_step >= oldest_allowed {
                self.finished = read_step;
                return Ok(true);
            }
        }
    }
}

/// Every how many steps one starts a read of its loss under the bound `limit`: half the bound,
/// so that the queue never falls below half of it after a wait.
fn read_stride(limit: u64) -> u64 {
    (limit / 2).max(1)
}

impl Drop for RunAhead {
    fn drop(&mut self) {
        // Finished, not dropped, even here (see `settle`); an error has no one to go to.
        let _ = self.settle();
    }
}

/// Waits for a started read to finish.
fn finish(started: Started) -> Result<(), String> {
    match started {
        Started::InFlight(read) => {
            burn::tensor::try_read_sync(read)
                .ok_or_else(|| "this platform cannot block on a device read".to_owned())??;
            Ok(())
        }
        Started::Done(result) => result,
    }
}

/// Starts reading `loss` now, so the read is queued behind the work that computes it, not
/// behind whatever is queued when it is waited for.
fn start_read<B: Backend>(loss: Tensor<B, 1>) -> Started {
    let primitive = loss.into_primitive().tensor();
    let read = B::float_into_data(primitive);
    let mut read: LossRead =
        Box::pin(async move { read.await.map_err(|error| format!("{error:?}")) });
    // One poll submits the read (Burn's reads are futures that do nothing until polled); the
    // waker is never needed, since the read is polled again, blocking, when waited for.
    let mut context = Context::from_waker(Waker::noop());
    match read.as_mut().poll(&mut context) {
        Poll::Ready(result) => Started::Done(result.map(drop)),
        Poll::Pending => Started::InFlight(read),
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::Tensor;

    use super::RunAhead;

    /// Queues `steps` steps under `limit`; returns the steps after which the host waited, and
    /// the steps whose reads are still pending at the end.
    fn run(steps: u64, limit: u64) -> (Vec<u64>, Vec<u64>) {
        let mut run_ahead = RunAhead::new();
        let waits = (1..=steps)
            .filter(|_| {
                let loss = Tensor::<Flex, 1>::ones([1], &Default::default());
                run_ahead.queued(loss, limit).unwrap()
            })
            .collect();
        let pending = run_ahead.reads.iter().map(|(step, _)| *step).collect();
        (waits, pending)
    }

    #[test]
    fn small_bounds_read_and_wait_every_step() {
        assert_eq!(run(5, 1), (vec![1, 2, 3, 4, 5], vec![]));
        assert_eq!(run(5, 2), (vec![2, 3, 4, 5], vec![5]));
        assert_eq!(run(5, 3), (vec![3, 4, 5], vec![4, 5]));
    }

    #[test]
    fn larger_bounds_read_every_half_bound_and_keep_half_of_it_queued() {
        // Reads at 4, 8, 12, 16; at step 8 the host waits for step 4, at 12 for 8, at 16 for 12.
        assert_eq!(run(17, 8), (vec![8, 12, 16], vec![16]));
        // Reads at 2, 4, 6, 8: waits for 2 at step 4, for 4 at 6, for 6 at 8.
        assert_eq!(run(9, 4), (vec![4, 6, 8], vec![8]));
        // An odd bound: reads every 2nd step, waits once 5 steps are queued past the last
        // finished one.
        assert_eq!(run(12, 5), (vec![5, 7, 9, 11], vec![10, 12]));
    }

    #[test]
    fn zero_never_reads_nor_waits() {
        assert_eq!(run(10, 0), (vec![], vec![]));
    }

    #[test]
    fn settle_starts_the_count_again() {
        let mut run_ahead = RunAhead::new();
        let loss = || Tensor::<Flex, 1>::ones([1], &Default::default());
        for _ in 0..3 {
            run_ahead.queued(loss(), 8).unwrap();
        }
        run_ahead.settle().unwrap();
        assert!(run_ahead.reads.is_empty());
        let waited: Vec<bool> = (0..8)
            .map(|_| run_ahead.queued(loss(), 8).unwrap())
            .collect();
        assert_eq!(
            waited,
            [false, false, false, false, false, false, false, true]
        );
    }
}
