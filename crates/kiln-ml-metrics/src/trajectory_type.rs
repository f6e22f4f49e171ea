//! Waymo's trajectory-shape buckets (`ClassifyTrack` in `motion_metrics_utils.cc`), which split
//! its mAP into straight, turning, U-turning and stationary objects.

use serde::{Deserialize, Serialize};

/// The shape of an object's ground-truth future, as Waymo buckets it for mAP.
///
/// The discriminants are Waymo's `TrajectoryType` values, which index its precision buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TrajectoryType {
    /// Slower than 2 m/s at both ends and less than 3 m from where it started.
    Stationary = 0,
    /// Heading within 30 degrees of the start and less than 2.5 m sideways.
    Straight = 1,
    /// Heading within 30 degrees, drifted to the left.
    StraightLeft = 2,
    /// Heading within 30 degrees, drifted to the right.
    StraightRight = 3,
    /// Turned left and ended behind the start.
    LeftUTurn = 4,
    /// Turned left.
    LeftTurn = 5,
    /// Turned right and ended behind the start (scored in the right-turn bucket).
    RightUTurn = 6,
    /// Turned right.
    RightTurn = 7,
}

/// Number of Waymo precision buckets (one per [`TrajectoryType`]; right U-turns stay empty).
pub const TRAJECTORY_TYPES: usize = 8;

/// One ground-truth state of an object, as [`TrajectoryType::classify`] reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackState {
    /// Center x in meters.
    pub x: f32,
    /// Center y in meters.
    pub y: f32,
    /// Heading in radians.
    pub heading: f32,
    /// Velocity x in m/s.
    pub velocity_x: f32,
    /// Velocity y in m/s.
    pub velocity_y: f32,
}

impl TrajectoryType {
    /// Waymo's priority for a joint prediction: the agent with the highest one names the
    /// prediction's bucket (`GetTrajectoryTypePriority`).
    pub fn priority(self) -> u8 {
        match self {
            TrajectoryType::Stationary => 0,
            TrajectoryType::Straight => 1,
            TrajectoryType::StraightRight => 2,
            TrajectoryType::StraightLeft => 3,
            TrajectoryType::RightTurn => 4,
            TrajectoryType::LeftTurn => 5,
            TrajectoryType::LeftUTurn => 6,
            TrajectoryType::RightUTurn => 7,
        }
    }

    /// The precision bucket this type is scored in: right U-turns count as right turns.
    pub fn bucket(self) -> usize {
        match self {
            TrajectoryType::RightUTurn => TrajectoryType::RightTurn as usize,
            other => other as usize,
        }
    }

    /// The shape of the motion from `start` (the current state) to `end` (the last valid
    /// future state), with Waymo's thresholds and its mix of `float` and `double` arithmetic.
    pub fn classify(start: TrackState, end: TrackState) -> Self {
        const MAX_SPEED_FOR_STATIONARY: f32 = 2.0;
        const MAX_DISPLACEMENT_FOR_STATIONARY: f64 = 3.0;
        const MAX_LATERAL_DISPLACEMENT_FOR_STRAIGHT: f64 = 2.5;
        const MIN_LONGITUDINAL_DISPLACEMENT_FOR_U_TURN: f32 = 0.0;
        const MAX_ABS_HEADING_DIFF_FOR_STRAIGHT: f32 = std::f32::consts::FRAC_PI_6;

        let x_delta = f64::from(end.x) - f64::from(start.x);
        let y_delta = f64::from(end.y) - f64::from(start.y);
        let final_displacement = x_delta.hypot(y_delta);
        let heading_diff = normalize_angle(end.heading - start.heading);
        let (sin, cos) = (-f64::from(start.heading)).sin_cos();
        let along = x_delta * cos - y_delta * sin;
        let across = x_delta * sin + y_delta * cos;
        let start_speed = start.velocity_x.hypot(start.velocity_y);
        let end_speed = end.velocity_x.hypot(end.velocity_y);
        let max_speed = start_speed.max(end_speed);
        let (dx, dy) = (along as f32, across as f32);

        if max_speed < MAX_SPEED_FOR_STATIONARY
            && final_displacement < MAX_DISPLACEMENT_FOR_STATIONARY
        {
            return TrajectoryType::Stationary;
        }
        if heading_diff.abs() < MAX_ABS_HEADING_DIFF_FOR_STRAIGHT {
            if across.abs() < MAX_LATERAL_DISPLACEMENT_FOR_STRAIGHT {
                return TrajectoryType::Straight;
            }
            return if dy < 0.0 {
                TrajectoryType::StraightRight
            } else {
                TrajectoryType::StraightLeft
            };
        }
        match (dy < 0.0, dx < MIN_LONGITUDINAL_DISPLACEMENT_FOR_U_TURN) {
            (true, true) => TrajectoryType::RightUTurn,
            (true, false) => TrajectoryType::RightTurn,
            (false, true) => TrajectoryType::LeftUTurn,
            (false, false) => TrajectoryType::LeftTurn,
        }
    }

    /// The type of a whole track: from the state at `current` to the last valid state after
    /// it. `None` when either is missing (Waymo then leaves the object out of mAP).
    ///
    /// ```
    /// use kiln_ml_metrics::{TrackState, TrajectoryType};
    ///
    /// let at = |y: f32| TrackState { x: 0.0, y, heading: 1.5707964, velocity_x: 0.0, velocity_y: 10.0 };
    /// let states = [at(0.0), at(1.0), at(2.0), at(3.0), at(4.0)];
    /// let valid = [true; 5];
    /// assert_eq!(TrajectoryType::of_track(&states, &valid, 1), Some(TrajectoryType::Straight));
    /// assert_eq!(TrajectoryType::of_track(&states, &[true, true, false, false, false], 1), None);
    /// ```
    pub fn of_track(states: &[TrackState], valid: &[bool], current: usize) -> Option<Self> {
        let last = (current + 1..states.len().min(valid.len()))
            .rev()
            .find(|&index| valid[index])?;
        if !valid.get(current).copied().unwrap_or(false) {
            return None;
        }
        Some(Self::classify(states[current], states[last]))
    }
}

/// Waymo's `NormalizeAngle` in `float`: `WrapToRange(-pi, pi, radians)` into [-pi, pi), with
/// its floating-point `PositiveModulo` (`math_util.h`).
fn normalize_angle(radians: f32) -> f32 {
    let min = -std::f64::consts::PI as f32;
    let max = std::f64::consts::PI as f32;
    positive_modulo(radians - min, max - min) + min
}

/// `PositiveModulo` for floating point: `x - trunc(x / y) * y`, shifted into [0, y).
fn positive_modulo(x: f32, y: f32) -> f32 {
    let truncated = (x * (1.0 / y)).trunc();
    let modulo = x - truncated * y;
    let shifted = y + modulo;
    if modulo >= 0.0 {
        modulo
    } else if shifted >= y {
        0.0
    } else {
        shifted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angles_wrap_into_minus_pi_to_pi() {
        assert!(
            (normalize_angle(3.0 * std::f32::consts::PI / 2.0) + std::f32::consts::FRAC_PI_2).abs()
                < 1e-6
        );
        assert!(
            (normalize_angle(-3.0 * std::f32::consts::PI / 2.0) - std::f32::consts::FRAC_PI_2)
                .abs()
                < 1e-6
        );
        assert_eq!(normalize_angle(0.25), 0.25);
        // Just below -pi wraps to just below pi, never to pi itself.
        let below = normalize_angle(-std::f32::consts::PI - 1e-3);
        assert!(below < std::f32::consts::PI && below > 3.0, "{below}");
        assert_eq!(positive_modulo(-1e-9, 2.0), 0.0);
    }

    #[test]
    fn right_u_turns_are_scored_with_right_turns() {
        assert_eq!(
            TrajectoryType::RightUTurn.bucket(),
            TrajectoryType::RightTurn as usize
        );
        assert_eq!(TrajectoryType::LeftUTurn.bucket(), 4);
        assert!(TrajectoryType::LeftUTurn.priority() > TrajectoryType::LeftTurn.priority());
    }
}
