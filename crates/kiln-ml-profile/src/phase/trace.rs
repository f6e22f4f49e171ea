//! Chrome trace-event JSON of the spans and device samples: opens in Perfetto
//! (ui.perfetto.dev) and `chrome://tracing`.

use std::path::Path;

use serde_json::{Value, json};

use super::{Action, Span};
use crate::Result;
use crate::monitor::DeviceSample;

/// Thread ids of the trace's rows.
const PHASES_TID: u64 = 1;
const STEPS_TID: u64 = 2;

/// The trace as a JSON value: phases as complete events (`"ph": "X"`) on one row, whole steps
/// on another, and device samples as counter tracks (`"ph": "C"`). Times are microseconds
/// from the profile's clock.
pub fn chrome_trace(spans: &[Span], samples: &[DeviceSample]) -> Value {
    let mut events = vec![
        thread_name(PHASES_TID, "phases"),
        thread_name(STEPS_TID, "steps"),
    ];
    for span in spans {
        let tid = if span.action == Action::Step {
            STEPS_TID
        } else {
            PHASES_TID
        };
        let mut args = json!({ "step": span.step });
        if let Some(sync) = span.sync {
            args["sync_us"] = json!(micros(sync));
        }
        events.push(json!({
            "name": span.action.name(),
            "cat": if span.action == Action::Step { "step" } else { "phase" },
            "ph": "X",
            "ts": micros(span.start),
            "dur": micros(span.duration),
            "pid": 1,
            "tid": tid,
            "args": args,
        }));
    }
    for sample in samples {
        let ts = micros(sample.at);
        let counters = [
            ("gpu utilization %", sample.gpu_utilization_percent),
            ("cpu utilization %", sample.cpu_utilization_percent),
            ("pool in use MiB", sample.pool_in_use_bytes.map(mib)),
            ("pool reserved MiB", sample.pool_reserved_bytes.map(mib)),
            ("gpu memory used MiB", sample.gpu_memory_used_bytes.map(mib)),
            ("ram used MiB", sample.ram_used_bytes.map(mib)),
        ];
        for (name, value) in counters {
            if let Some(value) = value {
                events.push(json!({
                    "name": name, "ph": "C", "ts": ts, "pid": 1, "args": { "value": value },
                }));
            }
        }
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

/// Writes [`chrome_trace`] to `path` (atomically).
pub fn write_chrome_trace(path: &Path, spans: &[Span], samples: &[DeviceSample]) -> Result<()> {
    let trace = chrome_trace(spans, samples);
    let bytes = serde_json::to_vec(&trace).map_err(|source| crate::Error::Json {
        what: "the Chrome trace".to_owned(),
        source,
    })?;
    let synced = kiln_ml_core::Durability::Synced;
    Ok(kiln_ml_core::write_atomic(path, &bytes, synced)?)
}

fn thread_name(tid: u64, name: &str) -> Value {
    json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": { "name": name } })
}

fn micros(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn spans_become_complete_events_and_samples_counters() {
        let spans = [
            Span {
                action: Action::Forward,
                step: 3,
                start: Duration::from_millis(2),
                duration: Duration::from_micros(1500),
                sync: Some(Duration::from_micros(100)),
            },
            Span {
                action: Action::Step,
                step: 3,
                start: Duration::from_millis(1),
                duration: Duration::from_millis(5),
                sync: None,
            },
        ];
        let samples = [DeviceSample {
            at: Duration::from_millis(4),
            pool_in_use_bytes: Some(2 * 1024 * 1024),
            ..DeviceSample::default()
        }];
        let trace = chrome_trace(&spans, &samples);
        let events = trace["traceEvents"].as_array().unwrap();
        let forward = events.iter().find(|e| e["name"] == "forward").unwrap();
        assert_eq!(forward["ph"], "X");
        assert_eq!(forward["ts"], 2000.0);
        assert_eq!(forward["dur"], 1500.0);
        assert_eq!(forward["args"]["step"], 3);
        assert_eq!(forward["args"]["sync_us"], 100.0);
        let step = events.iter().find(|e| e["name"] == "step").unwrap();
        assert_eq!(step["tid"], STEPS_TID);
        let pool = events
            .iter()
            .find(|e| e["name"] == "pool in use MiB")
            .unwrap();
        assert_eq!(pool["ph"], "C");
        assert_eq!(pool["args"]["value"], 2.0);
        // Missing figures make no counter events.
        assert!(!events.iter().any(|e| e["name"] == "gpu utilization %"));
    }

    #[test]
    fn writes_a_file_that_parses_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        write_chrome_trace(&path, &[], &[]).unwrap();
        let back: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back["traceEvents"].as_array().unwrap().len(), 2);
    }
}
