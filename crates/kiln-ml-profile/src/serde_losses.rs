//! Losses in JSON, where a diverged run's `NaN` or infinity has no number: written as `null`
//! and read back as `NaN`, so a report with one still loads.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Writes each loss, `null` for a non-finite one.
pub fn serialize<S: Serializer>(losses: &[f64], serializer: S) -> Result<S::Ok, S::Error> {
    losses
        .iter()
        .map(|loss| loss.is_finite().then_some(*loss))
        .collect::<Vec<Option<f64>>>()
        .serialize(serializer)
}

/// Reads the losses back, `NaN` for each `null`.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f64>, D::Error> {
    let losses = Vec::<Option<f64>>::deserialize(deserializer)?;
    Ok(losses
        .into_iter()
        .map(|loss| loss.unwrap_or(f64::NAN))
        .collect())
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Run {
        #[serde(with = "super")]
        losses: Vec<f64>,
    }

    #[test]
    fn a_diverged_loss_round_trips_as_nan() {
        let run = Run {
            losses: vec![2.5, f64::NAN, f64::INFINITY],
        };
        let json = serde_json::to_string(&run).unwrap();
        assert_eq!(json, r#"{"losses":[2.5,null,null]}"#);
        let back: Run = serde_json::from_str(&json).unwrap();
        assert_eq!(back.losses[0], 2.5);
        assert!(back.losses[1].is_nan() && back.losses[2].is_nan());
    }
}
