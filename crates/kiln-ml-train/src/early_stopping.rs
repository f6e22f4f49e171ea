//! Stopping when a monitored metric stops improving (Lightning's `EarlyStopping`).

use crate::Result;
use crate::callback::{Callback, CheckpointWriter, Decision, EpochContext, Mode};

/// Stops training once `monitor` has not improved by more than `min_delta` for `patience`
/// epochs in a row (Lightning's rule: `wait_count >= patience`, so patience 0 stops at the
/// first epoch without improvement). A NaN or infinite value stops training at once, as
/// Lightning's `check_finite` (on by default; [`with_check_finite`](Self::with_check_finite)),
/// without writing the diverged epoch's checkpoint ([`Decision::DIVERGED`]). Otherwise the
/// epoch it stops after still writes its checkpoint (when checkpoints are on). `fit` returns
/// its summary with [`stopped_early`](crate::FitSummary::stopped_early) set.
///
/// ```
/// use kiln_ml_train::{EarlyStopping, Mode};
///
/// let stopping = EarlyStopping::new("valid/min_ade", Mode::Min)
///     .with_patience(2)
///     .with_min_delta(1e-3);
/// assert_eq!(stopping.best(), None);
/// ```
#[derive(Debug, Clone)]
pub struct EarlyStopping {
    monitor: String,
    mode: Mode,
    patience: u32,
    min_delta: f64,
    check_finite: bool,
    best: Option<f64>,
    epochs_without_improvement: u32,
}

impl EarlyStopping {
    /// Monitors the metric `monitor` (as logged with
    /// [`Trainer::log_metric`](crate::Trainer::log_metric)); patience 3, `min_delta` 0.
    pub fn new(monitor: impl Into<String>, mode: Mode) -> Self {
        Self {
            monitor: monitor.into(),
            mode,
            patience: 3,
            min_delta: 0.0,
            check_finite: true,
            best: None,
            epochs_without_improvement: 0,
        }
    }

    /// Epochs without improvement after which to stop (0 and 1 both stop at the first one).
    pub fn with_patience(mut self, epochs: u32) -> Self {
        self.patience = epochs;
        self
    }

    /// The least change that counts as an improvement (Lightning's `min_delta`).
    pub fn with_min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta.abs();
        self
    }

    /// Whether a NaN or infinite value stops training at once (Lightning's `check_finite`,
    /// default true). Off, such a value is only an epoch without improvement (a NaN never
    /// improves; an infinity improves on nothing finite).
    pub fn with_check_finite(mut self, check_finite: bool) -> Self {
        self.check_finite = check_finite;
        self
    }

    /// The best value seen so far.
    pub fn best(&self) -> Option<f64> {
        self.best
    }

    /// Epochs in a row without improvement.
    pub fn epochs_without_improvement(&self) -> u32 {
        self.epochs_without_improvement
    }
}

impl Callback for EarlyStopping {
    fn on_epoch_end(
        &mut self,
        context: &EpochContext<'_>,
        _checkpoints: &dyn CheckpointWriter,
    ) -> Result<Decision> {
        let epoch = context.summary.epoch;
        // A data-parallel replica other than rank 0 may validate nothing: it follows rank 0's
        // decision, which `fit` gives every replica.
        if context.metrics.get(&self.monitor).is_none() && !context.is_main() {
            return Ok(Decision::CONTINUE);
        }
        let value = context
            .metrics
            .require(&self.monitor, "EarlyStopping", epoch)?;
        if self.check_finite && !value.is_finite() {
            log::warn!(
                "kiln-ml-train: EarlyStopping: `{}` = {value} after epoch {epoch} is not finite \
                 (best so far {:?}): stopping",
                self.monitor,
                self.best
            );
            self.epochs_without_improvement += 1;
            return Ok(Decision::DIVERGED);
        }
        // Against the worst value first, as Lightning's initial best (+inf in min mode): a
        // NaN never improves, an infinity of the wrong sign neither.
        let worst = match self.mode {
            Mode::Min => f64::INFINITY,
            Mode::Max => f64::NEG_INFINITY,
        };
        let improved = self
            .mode
            .improves(value, self.best.unwrap_or(worst), self.min_delta);
        if improved {
            self.best = Some(value);
            self.epochs_without_improvement = 0;
        } else {
            self.epochs_without_improvement += 1;
        }
        let stop = !improved && self.epochs_without_improvement >= self.patience;
        Ok(if stop {
            Decision::STOP
        } else {
            Decision::CONTINUE
        })
    }

    /// Lightning's key: the monitor and the mode (patience and `min_delta` may change on
    /// resume, and are not part of it).
    fn state_key(&self) -> Option<String> {
        let mode = match self.mode {
            Mode::Min => "min",
            Mode::Max => "max",
        };
        Some(format!(
            "EarlyStopping{{monitor={:?}, mode={mode}}}",
            self.monitor
        ))
    }

    /// The best value (as text: exact, and JSON has no infinities) and the epochs without
    /// improvement (Lightning's `best_score` and `wait_count`).
    fn state(&self) -> serde_json::Value {
        serde_json::json!({
            "best": self.best.map(|best| best.to_string()),
            "epochs_without_improvement": self.epochs_without_improvement,
        })
    }

    fn load_state(&mut self, state: &serde_json::Value) -> std::result::Result<(), String> {
        let best = match state.get("best") {
            Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(text)) => Some(
                text.parse::<f64>()
                    .map_err(|_| format!("`best` is {text:?}, not a number"))?,
            ),
            other => return Err(format!("`best` is {other:?}, not a number as text or null")),
        };
        let waited = state
            .get("epochs_without_improvement")
            .and_then(serde_json::Value::as_u64)
            .and_then(|epochs| u32::try_from(epochs).ok())
            .ok_or("`epochs_without_improvement` is missing or not a count")?;
        self.best = best;
        self.epochs_without_improvement = waited;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EpochSummary;
    use crate::Error;
    use crate::callback::EpochMetrics;

    struct NoWrites;
    impl CheckpointWriter for NoWrites {
        fn write_checkpoint(&self, _: &std::path::Path) -> Result<()> {
            unreachable!("early stopping writes no checkpoint")
        }
    }

    /// The epochs after which `stopping` stops, fed `values` one epoch each.
    fn stops(mut stopping: EarlyStopping, values: &[f64]) -> Vec<u64> {
        stops_into(&mut stopping, values)
    }

    /// As [`stops`], keeping the callback's state.
    fn stops_into(stopping: &mut EarlyStopping, values: &[f64]) -> Vec<u64> {
        let mut stopped = Vec::new();
        for (epoch, value) in values.iter().enumerate() {
            let mut metrics = EpochMetrics::default();
            metrics.insert("m", *value);
            let summary = EpochSummary {
                epoch: epoch as u64,
                ..EpochSummary::default()
            };
            let context = EpochContext::new(&summary, &metrics, 0);
            if stopping.on_epoch_end(&context, &NoWrites).unwrap().stop {
                stopped.push(epoch as u64);
            }
        }
        stopped
    }

    #[test]
    fn stops_after_patience_epochs_without_improvement() {
        let stopping = EarlyStopping::new("m", Mode::Min).with_patience(2);
        // Best at epoch 1; epoch 2 is the first without improvement, epoch 3 the second.
        assert_eq!(stops(stopping, &[1.0, 0.5, 0.6, 0.5, 0.7, 0.8]), [3, 4, 5]);
    }

    #[test]
    fn min_delta_and_max_mode() {
        let stopping = EarlyStopping::new("m", Mode::Max)
            .with_patience(0)
            .with_min_delta(0.1);
        // 0.55 is not 0.1 better than 0.5: stop at once.
        assert_eq!(stops(stopping, &[0.5, 0.55]), [1]);
        let stopping = EarlyStopping::new("m", Mode::Max).with_patience(0);
        assert!(stops(stopping, &[0.5, 0.55, 0.6]).is_empty());
    }

    #[test]
    fn a_value_that_is_not_finite_stops_at_once() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let stopping = EarlyStopping::new("m", Mode::Min).with_patience(5);
            assert_eq!(stops(stopping, &[1.0, bad, 0.5]), [1], "{bad}");
            let stopping = EarlyStopping::new("m", Mode::Max).with_patience(5);
            assert_eq!(stops(stopping, &[bad]), [0], "{bad}");
        }
    }

    #[test]
    fn a_missing_metric_is_an_error_on_the_main_replica_and_no_decision_on_another() {
        let mut stopping = EarlyStopping::new("m", Mode::Min).with_patience(0);
        let metrics = EpochMetrics::default();
        let summary = EpochSummary::default();
        let on_rank = |rank| EpochContext::new(&summary, &metrics, 0).on_rank(rank, 2);
        let decision = stopping.on_epoch_end(&on_rank(1), &NoWrites).unwrap();
        assert_eq!(decision, Decision::CONTINUE);
        assert_eq!(stopping.epochs_without_improvement(), 0);
        let error = stopping.on_epoch_end(&on_rank(0), &NoWrites).unwrap_err();
        assert!(matches!(error, Error::MissingMetric { .. }), "{error}");
    }

    #[test]
    fn its_state_round_trips_exactly_and_a_resumed_one_stops_where_the_whole_run_did() {
        let values = [1.0, 0.1 + 0.2, 0.5, 0.6, 0.7];
        let whole = stops(EarlyStopping::new("m", Mode::Min).with_patience(2), &values);
        assert_eq!(whole, [3, 4]);
        // Started afresh at epoch 3, it would take 0.6 as its best and not stop.
        let fresh = stops(
            EarlyStopping::new("m", Mode::Min).with_patience(2),
            &values[3..],
        );
        assert!(fresh.is_empty());
        let mut first = EarlyStopping::new("m", Mode::Min).with_patience(2);
        stops_into(&mut first, &values[..3]);
        let mut resumed = EarlyStopping::new("m", Mode::Min).with_patience(2);
        assert_eq!(resumed.state_key(), first.state_key());
        let saved = serde_json::to_string(&first.state()).unwrap();
        resumed
            .load_state(&serde_json::from_str(&saved).unwrap())
            .unwrap();
        assert_eq!(resumed.best(), Some(0.1 + 0.2), "exact, not 0.3");
        assert_eq!(resumed.epochs_without_improvement(), 1);
        // Epochs 3.. fed to the resumed callback stop at the same epochs as the whole run.
        let later: Vec<u64> = stops_into(&mut resumed, &values[3..])
            .into_iter()
            .map(|epoch| epoch + 3)
            .collect();
        assert_eq!(later, whole);
        // A best of -inf (check_finite off) survives JSON too.
        let mut infinite = EarlyStopping::new("m", Mode::Min).with_check_finite(false);
        stops_into(&mut infinite, &[f64::NEG_INFINITY]);
        let mut copy = EarlyStopping::new("m", Mode::Min);
        copy.load_state(&infinite.state()).unwrap();
        assert_eq!(copy.best(), Some(f64::NEG_INFINITY));
    }

    #[test]
    fn keys_tell_monitors_and_modes_apart_and_bad_states_are_named() {
        let key = |monitor: &str, mode| EarlyStopping::new(monitor, mode).state_key().unwrap();
        assert_eq!(
            key("valid/min_ade", Mode::Min),
            r#"EarlyStopping{monitor="valid/min_ade", mode=min}"#
        );
        assert_ne!(key("a", Mode::Min), key("a", Mode::Max));
        assert_ne!(key("a", Mode::Min), key("b", Mode::Min));
        let mut stopping = EarlyStopping::new("m", Mode::Min);
        stops_into(&mut stopping, &[1.0, 2.0]);
        let bad = serde_json::json!({"best": "x", "epochs_without_improvement": 3});
        assert!(stopping.load_state(&bad).unwrap_err().contains("`best`"));
        let bad = serde_json::json!({"best": "0.5"});
        let error = stopping.load_state(&bad).unwrap_err();
        assert!(error.contains("epochs_without_improvement"), "{error}");
        // A refused state changes nothing.
        assert_eq!(stopping.best(), Some(1.0));
        assert_eq!(stopping.epochs_without_improvement(), 1);
    }

    #[test]
    fn without_check_finite_nan_and_infinities_never_improve_on_a_finite_best() {
        let stopping = EarlyStopping::new("m", Mode::Min)
            .with_patience(2)
            .with_check_finite(false);
        assert_eq!(stops(stopping, &[1.0, f64::NAN, f64::NAN]), [2]);
        // A first +inf is no best in min mode (Lightning starts from +inf): 1.0 improves.
        let mut stopping = EarlyStopping::new("m", Mode::Min)
            .with_patience(1)
            .with_check_finite(false);
        assert_eq!(stops(stopping.clone(), &[f64::INFINITY, 1.0]), [0]);
        stops_into(&mut stopping, &[f64::INFINITY, 1.0]);
        assert_eq!(stopping.best(), Some(1.0));
        let stopping = EarlyStopping::new("m", Mode::Max)
            .with_patience(1)
            .with_check_finite(false);
        assert_eq!(stops(stopping, &[f64::NEG_INFINITY, f64::NAN]), [0, 1]);
    }
}
