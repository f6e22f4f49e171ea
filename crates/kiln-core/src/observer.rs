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
/// use kiln_core::{Event, Observer};
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

    /// Whether phase timings should include a device sync so they measure device work rather
    /// than kernel launches. Syncing costs throughput, so it is off unless an observer asks.
    fn wants_accurate_timing(&self) -> bool {
        false
    }
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
    fn wants_accurate_timing(&self) -> bool {
        (**self).wants_accurate_timing()
    }
}

impl<T: Observer + ?Sized> Observer for Box<T> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
    fn wants_accurate_timing(&self) -> bool {
        (**self).wants_accurate_timing()
    }
}

impl<T: Observer + ?Sized> Observer for Arc<T> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }
    fn wants_accurate_timing(&self) -> bool {
        (**self).wants_accurate_timing()
    }
}

/// Fans every event out to each observer in order; accurate timing if any of them asks.
impl<T: Observer> Observer for Vec<T> {
    fn on_event(&self, event: &Event) {
        for observer in self {
            observer.on_event(event);
        }
    }
    fn wants_accurate_timing(&self) -> bool {
        self.iter().any(Observer::wants_accurate_timing)
    }
}

impl<A: Observer, B: Observer> Observer for (A, B) {
    fn on_event(&self, event: &Event) {
        self.0.on_event(event);
        self.1.on_event(event);
    }
    fn wants_accurate_timing(&self) -> bool {
        self.0.wants_accurate_timing() || self.1.wants_accurate_timing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log {
        name: &'static str,
        lines: Arc<Mutex<Vec<String>>>,
        accurate: bool,
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
        fn wants_accurate_timing(&self) -> bool {
            self.accurate
        }
    }

    #[test]
    fn fan_out_keeps_order_and_ors_timing_requests() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let log = |name, accurate| Log {
            name,
            lines: Arc::clone(&lines),
            accurate,
        };
        let observers: Vec<Box<dyn Observer>> =
            vec![Box::new(log("a", false)), Box::new(log("b", true))];
        observers.on_event(&Event::EpochStart { epoch: 4 });
        assert_eq!(*lines.lock().unwrap(), ["a 4", "b 4"]);
        assert!(observers.wants_accurate_timing());
        assert!(!(NoObserver, log("c", false)).wants_accurate_timing());
    }
}
