//! The replicas of one node meeting in a sum: kiln's own all-reduce for one process.
//!
//! Under burn-fusion (the CUDA and wgpu backends) a tensor used by two threads is in danger in
//! Burn 0.21, in two ways, and both end with the device thread panicking ("Should have handle
//! for tensor") and a replica's next readback failing with CubeCL's `CallError`:
//!
//! - each thread is a fusion stream of its own, and 0.21's bookkeeping of tensors shared
//!   between streams races (tracel-ai/burn#4947, fixed after 0.21 by #4962). burn-collective's
//!   local server sums the replicas' tensors on its own threads, so every call shares tensors
//!   between streams: about one data-parallel run in five failed so on lavapipe under load;
//! - on one stream, two threads that each hold a clone of one tensor race on its reference
//!   count: a clone's use is marked read-only or last (read-write, which frees the buffer) from
//!   the count when the operation is built, but is queued later, so one thread's last use can
//!   reach the device before the other's read.
//!
//! So [`DataParallel`](crate::DataParallel) runs every replica thread of a run on one fusion
//! stream (`StreamId::executes`), and the replicas meet here on their own threads, exchanging
//! only tensors that no other thread holds a clone of: each replica sends the concatenation of
//! its pieces (a new tensor),
//! the last to arrive adds them up in rank order on rank 0's device, and each replica receives
//! a tensor of its own on its own device. The same values for every replica, in every run.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// What [`ReplicaGroup::abort`] makes every waiting and later call return: a replica's
/// failure released it (the launcher reports the failed replica, not these echoes).
pub(crate) const RELEASED: &str = "released: another replica failed";

/// The replicas of one run on one node, meeting call by call.
pub(crate) struct ReplicaGroup {
    replicas: usize,
    state: Mutex<Meeting>,
    changed: Condvar,
    watch: Option<StallWatch>,
}

/// Who reports a call that waits longer than `after`, and how: once per call, by the first
/// replica whose wait reaches it, and again when that call completes.
#[derive(Clone)]
pub(crate) struct StallWatch {
    pub(crate) after: Duration,
    pub(crate) report: Arc<dyn Fn(&str) + Send + Sync>,
}

impl StallWatch {
    /// Reports on stderr, whatever logger is installed: a hung run has no other voice.
    pub(crate) fn on_stderr(after: Duration) -> Self {
        Self {
            after,
            report: Arc::new(|message| eprintln!("warning: kiln-ml-train: {message}")),
        }
    }
}

/// One call's meeting: replicas arrive with their part, the last one computes every answer,
/// each takes its own, and the last to take one opens the next call.
#[derive(Default)]
struct Meeting {
    arrivals: Vec<Option<Arrival>>,
    arrived: usize,
    answers: Vec<Option<Result<Box<dyn Any + Send>, String>>>,
    taken: usize,
    /// Whether the last to arrive is computing the answers (outside the lock).
    reducing: bool,
    /// Whether the answers are out (the next call waits until all are taken).
    answered: bool,
    aborted: Option<String>,
    /// Calls completed so far: the current call's number, from 0.
    completed: u64,
    /// When the current call's first replica arrived.
    opened: Option<Instant>,
    /// Whether the current call's stall was reported.
    stall_reported: bool,
}

impl Meeting {
    /// What a report of the current call's stall says: who is in it and who is not.
    fn stall(&self, call: Call, waited: Duration) -> String {
        let ranks = |arrived: bool| -> Vec<String> {
            (self.arrivals.iter().enumerate())
                .filter(|(_, arrival)| arrival.is_some() == arrived)
                .map(|(rank, _)| rank.to_string())
                .collect()
        };
        let number = self.completed;
        if self.reducing {
            return format!(
                "data-parallel call {number} ({call}) has waited {:.0} s: every replica is in \
                 it, and the sum on rank 0's device has not finished",
                waited.as_secs_f64()
            );
        }
        format!(
            "data-parallel call {number} ({call}) has waited {:.0} s: local ranks [{}] are in \
             it, local ranks [{}] have not arrived (still in their step: the first steps \
             compile kernels; or hung)",
            waited.as_secs_f64(),
            ranks(true).join(", "),
            ranks(false).join(", ")
        )
    }
}

/// What one replica brings to a call.
struct Arrival {
    call: Call,
    /// The replica's tensor (a `Tensor<B, 1>`) for a sum.
    tensor: Option<Box<dyn Any + Send>>,
}

/// The kind of call, which every replica must make alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Sum { elements: usize },
    Close,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sum { elements } => write!(f, "a sum of {elements} elements"),
            Self::Close => write!(f, "the closing call (its training ended)"),
        }
    }
}

impl fmt::Debug for ReplicaGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaGroup")
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl ReplicaGroup {
    /// A group of `replicas` replicas, ranked `0..replicas`, which reports calls that wait
    /// past `watch`'s time.
    pub(crate) fn new(replicas: usize, watch: Option<StallWatch>) -> Self {
        Self {
            replicas,
            state: Mutex::new(Meeting::default()),
            changed: Condvar::new(),
            watch,
        }
    }

    /// The element-wise sum of every replica's `pieces` concatenated, on `rank`'s device. Every
    /// replica calls it with pieces of the same total length; otherwise all of them get a
    /// "Mismatch" error.
    pub(crate) fn sum<B: Backend>(
        &self,
        rank: usize,
        pieces: Vec<Tensor<B, 1>>,
    ) -> Result<Tensor<B, 1>, String> {
        // The concatenation is a new tensor (even of one piece), so the group only ever sees a
        // tensor of its own, whatever clones of the pieces the caller keeps: no extra copy.
        let own = Tensor::cat(pieces, 0);
        let call = Call::Sum {
            elements: own.dims()[0],
        };
        let answer = self.meet(rank, call, Some(Box::new(own)), add_up::<B>)?;
        Ok(*answer
            .downcast::<Tensor<B, 1>>()
            .expect("every replica of a run sums tensors of one backend"))
    }

    /// The meeting a replica calls when its training ended: a replica still training meets it
    /// with a sum instead, and both fail with a "Mismatch" error rather than one training alone.
    pub(crate) fn close(&self, rank: usize) -> Result<(), String> {
        self.meet(rank, Call::Close, None, |_| {
            unreachable!("closing calls carry no tensors")
        })
        .map(drop)
    }

    /// Fails every call waiting now and every later one with [`RELEASED`], naming `why`.
    pub(crate) fn abort(&self, why: &str) {
        let mut state = self.lock();
        state.aborted.get_or_insert_with(|| why.to_owned());
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Meeting> {
        // A replica that panicked while holding the lock is reported by the launcher, which
        // aborts the group: the state itself stays consistent enough to answer "released".
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wait<'a>(&self, state: MutexGuard<'a, Meeting>) -> MutexGuard<'a, Meeting> {
        self.changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Brings `rank`'s part to the current call, waits for every replica, and returns `rank`'s
    /// answer. The last to arrive computes the answers with `reduce` (tensors in rank order).
    fn meet(
        &self,
        rank: usize,
        call: Call,
        tensor: Option<Box<dyn Any + Send>>,
        reduce: impl FnOnce(Vec<Box<dyn Any + Send>>) -> Vec<Box<dyn Any + Send>>,
    ) -> Result<Box<dyn Any + Send>, String> {
        let released = |why: &str| format!("{RELEASED} ({why})");
        let mut state = self.lock();
        // The previous call's answers must all be taken before this one gathers.
        while (state.answered || state.reducing) && state.aborted.is_none() {
            state = self.wait(state);
        }
        if let Some(why) = &state.aborted {
            return Err(released(why));
        }
        if state.arrivals.is_empty() {
            state.arrivals.resize_with(self.replicas, || None);
        }
        assert!(
            state.arrivals[rank].is_none(),
            "replica {rank} is already in this call"
        );
        state.arrivals[rank] = Some(Arrival { call, tensor });
        if state.arrived == 0 {
            state.opened = Some(Instant::now());
            state.stall_reported = false;
        }
        state.arrived += 1;
        let number = state.completed;
        if state.arrived == self.replicas {
            let arrivals: Vec<Arrival> = state
                .arrivals
                .drain(..)
                .map(|arrival| arrival.expect("every replica arrived"))
                .collect();
            state.arrived = 0;
            state.reducing = true;
            // Reduce without the lock: copies to other devices block on them, and an abort
            // must not wait for a device that hangs.
            drop(state);
            let computed = answers(arrivals, reduce);
            state = self.lock();
            state.answers = computed;
            state.reducing = false;
            state.answered = true;
            state.completed += 1;
            self.changed.notify_all();
        }
        let mut reported_here = false;
        while !state.answered && state.aborted.is_none() {
            let Some(watch) = &self.watch else {
                state = self.wait(state);
                continue;
            };
            let waited = (state.opened).map_or(Duration::ZERO, |opened| opened.elapsed());
            if waited >= watch.after && !state.stall_reported {
                state.stall_reported = true;
                reported_here = true;
                let report = state.stall(call, waited);
                // Written without the lock: a blocked stderr must not block the others (nor
                // an abort); what changed meanwhile is checked again below.
                drop(state);
                (watch.report)(&report);
                state = self.lock();
                continue;
            }
            state = if state.stall_reported {
                // Reported: the completion (or an abort) is what comes next.
                self.wait(state)
            } else {
                (self.changed)
                    .wait_timeout(state, watch.after - waited)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0
            };
        }
        let completion = (reported_here && state.answered)
            .then(|| state.opened.map(|opened| opened.elapsed()))
            .flatten();
        if !state.answered {
            let why = state.aborted.clone().unwrap_or_default();
            return Err(released(&why));
        }
        let answer = state.answers[rank]
            .take()
            .expect("each replica takes its answer once");
        state.taken += 1;
        if state.taken == self.replicas {
            state.answers.clear();
            state.taken = 0;
            state.answered = false;
            self.changed.notify_all();
        }
        drop(state);
        if let (Some(watch), Some(took)) = (&self.watch, completion) {
            (watch.report)(&format!(
                "data-parallel call {number} ({call}) completed after {:.0} s",
                took.as_secs_f64()
            ));
        }
        answer
    }
}

/// Every replica's answer to one call: the reduced tensors when all made the same call, and a
/// "Mismatch" error naming the calls when they did not.
fn answers(
    arrivals: Vec<Arrival>,
    reduce: impl FnOnce(Vec<Box<dyn Any + Send>>) -> Vec<Box<dyn Any + Send>>,
) -> Vec<Option<Result<Box<dyn Any + Send>, String>>> {
    let replicas = arrivals.len();
    let first = arrivals[0].call;
    if arrivals.iter().any(|arrival| arrival.call != first) {
        let calls: Vec<String> = arrivals
            .iter()
            .enumerate()
            .map(|(rank, arrival)| format!("rank {rank} made {}", arrival.call))
            .collect();
        let message = format!("Mismatch between the replicas' calls: {}", calls.join(", "));
        return (0..replicas).map(|_| Some(Err(message.clone()))).collect();
    }
    if first == Call::Close {
        return (0..replicas)
            .map(|_| Some(Ok(Box::new(()) as Box<dyn Any + Send>)))
            .collect();
    }
    let tensors = arrivals
        .into_iter()
        .map(|arrival| arrival.tensor.expect("a sum carries a tensor"))
        .collect();
    reduce(tensors)
        .into_iter()
        .map(|sum| Some(Ok(sum)))
        .collect()
}

/// A new tensor equal to `tensor` (times one: exact for every value, NaN and -0 included), which
/// shares no reference count with `tensor`'s clones.
fn own_copy<B: Backend>(tensor: Tensor<B, 1>) -> Tensor<B, 1> {
    tensor.mul_scalar(1.0)
}

/// The sum of `tensors` (each a `Tensor<B, 1>`) added in rank order on rank 0's device, and for
/// each replica a tensor of its own on its device: rank 0 the sum itself, the others copies,
/// all made on this thread before any replica sees them.
fn add_up<B: Backend>(tensors: Vec<Box<dyn Any + Send>>) -> Vec<Box<dyn Any + Send>> {
    let tensors: Vec<Tensor<B, 1>> = tensors
        .into_iter()
        .map(|tensor| {
            *tensor
                .downcast::<Tensor<B, 1>>()
                .expect("every replica of a run sums tensors of one backend")
        })
        .collect();
    let devices: Vec<B::Device> = tensors.iter().map(Tensor::device).collect();
    let root = devices[0].clone();
    let sum = tensors
        .into_iter()
        .map(|tensor| tensor.to_device(&root))
        .reduce(|sum, tensor| sum + tensor)
        .expect("a group has at least one replica");
    let copies: Vec<Box<dyn Any + Send>> = devices[1..]
        .iter()
        .map(|device| {
            let copy = if *device == root {
                own_copy(sum.clone())
            } else {
                sum.clone().to_device(device)
            };
            Box::new(copy) as Box<dyn Any + Send>
        })
        .collect();
    std::iter::once(Box::new(sum) as Box<dyn Any + Send>)
        .chain(copies)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type B = Flex;

    fn tensor(values: &[f32]) -> Tensor<B, 1> {
        Tensor::from_data(TensorData::from(values), &Default::default())
    }

    fn values(tensor: Tensor<B, 1>) -> Vec<f32> {
        tensor.into_data().to_vec().unwrap()
    }

    /// Runs `work(rank, group)` on `replicas` threads and returns what each returned.
    fn on_threads<T: Send>(
        replicas: usize,
        work: impl Fn(usize, &ReplicaGroup) -> T + Sync,
    ) -> Vec<T> {
        let group = ReplicaGroup::new(replicas, None);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..replicas)
                .map(|rank| {
                    let (group, work) = (&group, &work);
                    scope.spawn(move || work(rank, group))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn every_replica_gets_the_sum_of_every_call() {
        let sums = on_threads(3, |rank, group| {
            (0..50)
                .map(|call| {
                    let value = (rank * 100 + call) as f32;
                    values(
                        group
                            .sum(rank, vec![tensor(&[value]), tensor(&[1.0])])
                            .unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        });
        for (call, sum) in sums[0].iter().enumerate() {
            assert_eq!(sum, &vec![(300 + 3 * call) as f32, 3.0], "call {call}");
        }
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[0], sums[2]);
    }

    #[test]
    fn calls_of_different_kinds_fail_on_every_replica() {
        let outcomes = on_threads(2, |rank, group| {
            if rank == 0 {
                group.close(rank).err()
            } else {
                group.sum(rank, vec![tensor(&[1.0, 2.0])]).err()
            }
        });
        for error in outcomes {
            let error = error.expect("both fail");
            assert!(error.contains("Mismatch"), "{error}");
            assert!(error.contains("rank 0 made the closing call"), "{error}");
            assert!(error.contains("rank 1 made a sum of 2 elements"), "{error}");
        }
        let lengths = on_threads(2, |rank, group| {
            group
                .sum(rank, vec![tensor(&vec![0.0; rank + 1])])
                .unwrap_err()
        });
        assert!(lengths[0].contains("a sum of 1 elements"), "{}", lengths[0]);
    }

    #[test]
    fn an_abort_releases_waiting_and_later_calls() {
        let group = ReplicaGroup::new(2, None);
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| group.sum(0, vec![tensor(&[1.0])]));
            // Whether rank 0 is waiting yet or not, it is released.
            group.abort("rank 1 gave up");
            let error = waiting.join().unwrap().unwrap_err();
            assert!(error.starts_with(RELEASED), "{error}");
            assert!(error.contains("rank 1 gave up"), "{error}");
        });
        let later = group.close(0).unwrap_err();
        assert!(later.contains("rank 1 gave up"), "{later}");
    }

    #[test]
    fn a_call_that_waits_past_the_watch_is_reported_once_then_its_completion() {
        let reports = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = reports.clone();
        let watch = StallWatch {
            after: Duration::from_millis(200),
            report: Arc::new(move |message| sink.lock().unwrap().push(message.to_owned())),
        };
        let group = ReplicaGroup::new(3, Some(watch));
        std::thread::scope(|scope| {
            // Call 0 completes at once; in call 1, rank 2 comes late.
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let group = &group;
                    scope.spawn(move || {
                        group.sum(rank, vec![tensor(&[1.0])]).unwrap();
                        if rank == 2 {
                            std::thread::sleep(Duration::from_millis(1500));
                        }
                        values(group.sum(rank, vec![tensor(&[1.0, 2.0])]).unwrap())
                    })
                })
                .collect();
            for handle in handles {
                assert_eq!(handle.join().unwrap(), [3.0, 6.0]);
            }
        });
        // Call 0 is reported too where a thread started late (a loaded machine).
        let reports: Vec<String> = (reports.lock().unwrap().iter())
            .filter(|report| report.starts_with("data-parallel call 1 "))
            .cloned()
            .collect();
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert!(
            reports[0].starts_with("data-parallel call 1 (a sum of 2 elements) has waited"),
            "{}",
            reports[0]
        );
        // Rank 1 may still be on its way when the report is written (a loaded machine).
        assert!(
            reports[0].contains("local ranks [2] have not arrived")
                || reports[0].contains("local ranks [1, 2] have not arrived"),
            "{}",
            reports[0]
        );
        assert!(
            reports[1].starts_with("data-parallel call 1 (a sum of 2 elements) completed after"),
            "{}",
            reports[1]
        );
    }

    #[test]
    fn a_single_replica_meets_itself() {
        let group = ReplicaGroup::new(1, None);
        assert_eq!(
            values(group.sum(0, vec![tensor(&[2.0, 3.0])]).unwrap()),
            [2.0, 3.0]
        );
        group.close(0).unwrap();
    }
}
