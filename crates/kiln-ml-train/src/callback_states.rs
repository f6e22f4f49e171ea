//! The callbacks' states in checkpoints: what each stateful callback saved, by its key, and
//! what a loaded checkpoint holds for the callbacks of the next `fit`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::{Callback, Error, Result};

/// The last known state of each stateful callback, by [`Callback::state_key`]: what the next
/// checkpoint saves. After a checkpoint is loaded, its states wait here until `fit` starts and
/// gives each to the callback with its key (callbacks may be added before or after loading).
#[derive(Debug, Default)]
pub(crate) struct CallbackStates {
    states: BTreeMap<String, Value>,
    /// The checkpoint whose states no `fit` has given out yet.
    loaded: Option<PathBuf>,
}

impl CallbackStates {
    /// What a checkpoint saves.
    pub(crate) fn saved(&self) -> &BTreeMap<String, Value> {
        &self.states
    }

    /// Takes the states a checkpoint saved, in place of every state known so far.
    pub(crate) fn load(&mut self, path: PathBuf, states: BTreeMap<String, Value>) {
        self.states = states;
        self.loaded = Some(path);
    }

    /// At the start of `fit`: checks that no two callbacks share a key, gives each callback
    /// the state a loaded checkpoint saved under its key, and notes the current state of the
    /// others. A loaded state no callback takes is dropped with a warning (Lightning's too).
    pub(crate) fn hand_out(&mut self, callbacks: &mut [Box<dyn Callback>]) -> Result<()> {
        let keys: Vec<Option<String>> = callbacks.iter().map(|c| c.state_key()).collect();
        for (second, key) in keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if let Some(first) = keys[..second].iter().position(|k| k.as_ref() == Some(key)) {
                return Err(Error::DuplicateCallbackState {
                    key: key.clone(),
                    first,
                    second,
                });
            }
        }
        if let Some(path) = &self.loaded {
            // Every state is given before any is noted, and a refused one leaves the loaded
            // states waiting: a second `fit` fails the same way rather than starting afresh.
            for (callback, key) in callbacks.iter_mut().zip(&keys) {
                let Some(key) = key else { continue };
                if let Some(state) = self.states.get(key) {
                    callback
                        .load_state(state)
                        .map_err(|reason| Error::CheckpointFormat {
                            path: path.clone(),
                            reason: format!("the state of callback `{key}` ({state}): {reason}"),
                        })?;
                }
            }
        }
        let loaded = self.loaded.take();
        let mut unclaimed = if loaded.is_some() {
            std::mem::take(&mut self.states)
        } else {
            BTreeMap::new()
        };
        for (callback, key) in callbacks.iter().zip(keys) {
            let Some(key) = key else { continue };
            unclaimed.remove(&key);
            self.states.insert(key, callback.state());
        }
        if let Some(path) = &loaded {
            for key in unclaimed.keys() {
                log::warn!(
                    "kiln-ml-train: checkpoint {} holds the state of callback `{key}`, which \
                     this trainer does not have: it is dropped (add the callback before `fit` \
                     to continue it)",
                    path.display()
                );
            }
        }
        Ok(())
    }

    /// Notes `callback`'s state after it ran at an epoch's end.
    pub(crate) fn record(&mut self, callback: &dyn Callback) {
        if let Some(key) = callback.state_key() {
            self.states.insert(key, callback.state());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::{CheckpointWriter, Decision, EpochContext};

    /// Counts the states it was given; keyed by its name.
    struct Counter {
        name: &'static str,
        value: u64,
    }

    impl Callback for Counter {
        fn on_epoch_end(
            &mut self,
            _: &EpochContext<'_>,
            _: &dyn CheckpointWriter,
        ) -> Result<Decision> {
            self.value += 1;
            Ok(Decision::CONTINUE)
        }
        fn state_key(&self) -> Option<String> {
            Some(self.name.to_owned())
        }
        fn state(&self) -> Value {
            Value::from(self.value)
        }
        fn load_state(&mut self, state: &Value) -> std::result::Result<(), String> {
            self.value = state.as_u64().ok_or("not a count")?;
            Ok(())
        }
    }

    fn counter(name: &'static str, value: u64) -> Box<dyn Callback> {
        Box::new(Counter { name, value })
    }

    fn values(callbacks: &[Box<dyn Callback>]) -> Vec<Value> {
        callbacks.iter().map(|callback| callback.state()).collect()
    }

    #[test]
    fn loaded_states_go_to_their_keys_and_the_others_keep_theirs() {
        let mut states = CallbackStates::default();
        let saved = BTreeMap::from([
            ("a".to_owned(), Value::from(7)),
            ("gone".to_owned(), Value::from(1)),
        ]);
        states.load(PathBuf::from("run.kiln"), saved);
        let mut callbacks = vec![counter("b", 2), counter("a", 0)];
        states.hand_out(&mut callbacks).unwrap();
        assert_eq!(values(&callbacks), [Value::from(2), Value::from(7)]);
        // `gone` has no callback: not saved again.
        let keys: Vec<&str> = states.saved().keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "b"]);
        // Given out once: a second fit keeps the callbacks' own states.
        callbacks[1] = counter("a", 9);
        states.hand_out(&mut callbacks).unwrap();
        assert_eq!(values(&callbacks), [Value::from(2), Value::from(9)]);
    }

    #[test]
    fn a_shared_key_and_a_bad_state_are_errors() {
        let mut states = CallbackStates::default();
        let mut callbacks = vec![counter("a", 0), counter("b", 0), counter("a", 1)];
        let error = states.hand_out(&mut callbacks).unwrap_err();
        assert!(
            matches!(&error, Error::DuplicateCallbackState { key, first: 0, second: 2 } if key == "a"),
            "{error}"
        );
        states.load(
            PathBuf::from("run.kiln"),
            BTreeMap::from([("a".to_owned(), Value::from("x"))]),
        );
        let error = states
            .hand_out(&mut callbacks[..1])
            .unwrap_err()
            .to_string();
        assert!(error.contains("run.kiln"), "{error}");
        assert!(error.contains("callback `a`"), "{error}");
        assert!(error.contains("not a count"), "{error}");
        // Still waiting: a second try fails the same way instead of starting afresh.
        let again = states.hand_out(&mut callbacks[..1]).unwrap_err();
        assert_eq!(again.to_string(), error);
    }
}
