//! The `Observer` seam: receivers of training and loading events.

use std::sync::Arc;

use crate::Event;

/// Receives [`Event`]s from the loader and the trainer.
///
/// Observers are shared between threads (the loader's consumer and the training loop), so
/// [`on_event`](Observer::on_event) takes `&self`: keep mutable state behind a lock or atomics.
/// Progress bars, loggers and profilers are observers; the trainer knows none of them.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use kiln_ml_core::{Event, Observer};
///
/// /// Counts finished epochs.
/// #[derive(Default)]
/// struct Epochs(AtomicU64);
///
/// impl Observer for Epochs {
///     fn on_event(&self, event: &Event) {
///         if let Event::EpochEnd { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let epochs = Epochs::default();
/// epochs.on_event(&Event::EpochEnd { epoch: 0, steps: 10, samples: 640 });
/// assert_eq!(epochs.0.load(Ordering::Relaxed), 1);
/// ```
pub trait Observer: Send + Sync {
    /// Handles one event. Must be quick: it runs on the training thread.
    fn on_event(&self, event: &Event);

    /// How much device synchronization optimizer step `step` should have so its phase timings
    /// measure device work rather than kernel launches. Syncing costs throughput, so the
    /// default is [`Timing::Host`]: no sync added.
    fn timing(&self, step: u64) -> Timing {
        let _ = step;
        Timing::Host
    }
}

/// How a step's phases are timed, from cheapest to most accurate. Observers ask; the trainer
/// syncs as much as the most demanding one asks. (A timed validation pass is its own unit of
/// device work: kiln's trainer syncs before and after it whatever the timing.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Timing {
    /// No device sync: phases measure how long the host took to enqueue the work.
    #[default]
    Host,
    /// One device sync at the end of the step (in its optimizer phase): its wall time is the
    /// device's, the split into phases the host's.
    Step,
    /// A device sync at the end of every phase: each phase measures its device work.
    Phases,
}

/// The observer that ignores everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _event: &Event) {}
}

impl<T: Observer + ?Sized> Observer for &T {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
    fn timing(&self, step: u64) -> Timing {
        (**self).timing(step)
    }
}

impl<T: Observer + ?Sized> Observer for Box<T> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
    fn timing(&self, step: u64) -> Timing {
        (**self).timing(step)
    }
}

impl<T: Observer + ?Sized> Observer for Arc<T> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
    fn timing(&self, step: u64) -> Timing {
        (**self).timing(step)
    }
}

/// Fans every event out to each observer in order; times as accurately as the most demanding.
impl<T: Observer> Observer for Vec<T> {
    fn on_event(&self, event: &Event) {
        for observer in self {
            observer.on_event(event);
        }
    }
    fn timing(&self, step: u64) -> Timing {
        self.iter()
            .map(|observer| observer.timing(step))
            .max()
            .unwrap_or_default()
    }
}

impl<A: Observer, B: Observer> Observer for (A, B) {
    fn on_event(&self, event: &Event) {
        self.0.on_event(event);
        self.1.on_event(event);
    }
    fn timing(&self, step: u64) -> Timing {
        self.0.timing(step).max(self.1.timing(step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log {
        name: &'static str,
        lines: Arc<Mutex<Vec<String>>>,
        timing: Timing,
    }

    impl Observer for Log {
        fn on_event(&self, event: &Event) {
            if let Event::EpochStart { epoch } = event {
                self.lines
                    .lock()
                    .unwrap()
                    .push(format!("{} {epoch}", self.name));
            }
        }
        fn timing(&self, _step: u64) -> Timing {
            self.timing
        }
    }

    #[test]
    fn fan_out_keeps_order_and_times_as_the_most_demanding_asks() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let log = |name, timing| Log {
            name,
            lines: Arc::clone(&lines),
            timing,
        };
        let observers: Vec<Box<dyn Observer>> = vec![
            Box::new(log("a", Timing::Step)),
            Box::new(log("b", Timing::Phases)),
            Box::new(log("c", Timing::Host)),
        ];
        observers.on_event(&Event::EpochStart { epoch: 4 });
        assert_eq!(*lines.lock().unwrap(), ["a 4", "b 4", "c 4"]);
        assert_eq!(observers.timing(1), Timing::Phases);
        assert_eq!((NoObserver, log("d", Timing::Step)).timing(1), Timing::Step);
        assert_eq!(Vec::<NoObserver>::new().timing(1), Timing::Host);
    }
}
