//! An observer that records every event it sees.

use std::sync::Mutex;

use kiln_ml_core::{Event, Observer, Timing};

/// Keeps every event, in arrival order, for assertions.
#[derive(Debug, Default)]
pub struct RecordingObserver {
    events: Mutex<Vec<Event>>,
    accurate_timing: bool,
}

impl RecordingObserver {
    /// A recorder that does not ask for accurate timing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A recorder that asks for device-synchronized phase timing.
    pub fn with_accurate_timing() -> Self {
        Self {
            events: Mutex::default(),
            accurate_timing: true,
        }
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Takes the events so far, leaving none.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl Observer for RecordingObserver {
    fn on_event(&self, event: &Event) {
        self.events.lock().unwrap().push(event.clone());
    }
    fn timing(&self, _step: u64) -> Timing {
        if self.accurate_timing {
            Timing::Phases
        } else {
            Timing::Host
        }
    }
}
