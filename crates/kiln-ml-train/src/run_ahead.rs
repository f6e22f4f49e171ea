//! The bound on how far the host runs ahead of the device, without draining the device's queue.
//!
//! Each optimizer step that reads nothing back starts an asynchronous read of its loss (one
//! value) right after it is queued; the read lands in the device's queue behind that step's
//! work. Once `max_queued_steps` steps are queued, the host waits for the read of the oldest:
//! for that step to finish, while the later ones stay queued. The device never runs dry between
//! steps (a device sync would empty its queue, and the host would then queue the next step
//! onto an idle device, which is what hides launch latency lost), and the host never gets more
//! than the bound ahead. CUDA's launch queue gives PyTorch the same bound.

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

/// The steps queued on the device, oldest first, each with the read that tells when it ended.
pub(crate) struct RunAhead {
    queued: VecDeque<Started>,
}

impl RunAhead {
    pub(crate) fn new() -> Self {
        Self {
            queued: VecDeque::new(),
        }
    }

    /// Waits for every queued step, before a readback that waits for all of them anyway. A
    /// started read is always finished, never dropped: Burn's wgpu runtime maps a staging
    /// buffer for it, and a buffer handed back while its mapping is pending breaks the next
    /// read that gets it.
    pub(crate) fn settle(&mut self) -> Result<(), String> {
        while let Some(started) = self.queued.pop_front() {
            finish(started)?;
        }
        Ok(())
    }

    /// Records a step just queued, whose loss is `loss`, and, when more than `limit - 1` steps
    /// were queued before it, waits for the oldest to finish. Returns whether it waited. 0
    /// never waits; 1 waits for this very step (a sync per step).
    pub(crate) fn queued<B: Backend>(
        &mut self,
        loss: Tensor<B, 1>,
        limit: u64,
    ) -> Result<bool, String> {
        if limit == 0 {
            return Ok(false);
        }
        self.queued.push_back(start_read(loss));
        if (self.queued.len() as u64) < limit {
            return Ok(false);
        }
        finish(self.queued.pop_front().expect("a step was just queued"))?;
        Ok(true)
    }
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
