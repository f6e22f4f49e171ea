//! Waymo's trajectory-type classification vectors:
//! `waymo-research/waymo-open-dataset:src/waymo_open_dataset/metrics/motion_metrics_utils_test.cc`
//! (`ClassifyTrack*`), each with the test's two rotated tracks and its sweep of rotated points.

use kiln_ml_metrics::{TrackState, TrajectoryType};

/// `CreateTrackFromPoints`: headings and velocities (10 Hz) from the deltas to the next point;
/// the last state copies the one before.
fn track_from_points(points: &[[f64; 2]]) -> Vec<TrackState> {
    let mut states: Vec<TrackState> = points
        .iter()
        .map(|p| TrackState {
            x: p[0] as f32,
            y: p[1] as f32,
            heading: 0.0,
            velocity_x: 0.0,
            velocity_y: 0.0,
        })
        .collect();
    for i in 0..points.len() {
        if i + 1 < points.len() {
            let (dx, dy) = (
                points[i + 1][0] - points[i][0],
                points[i + 1][1] - points[i][1],
            );
            states[i].heading = dy.atan2(dx) as f32;
            states[i].velocity_x = (dx * 10.0) as f32;
            states[i].velocity_y = (dy * 10.0) as f32;
        } else {
            let previous = states[i - 1];
            states[i].heading = previous.heading;
            states[i].velocity_x = previous.velocity_x;
            states[i].velocity_y = previous.velocity_y;
        }
    }
    states
}

fn rotate(point: [f64; 2], angle: f64) -> [f64; 2] {
    let (sin, cos) = angle.sin_cos();
    [
        point[0] * cos - point[1] * sin,
        point[0] * sin + point[1] * cos,
    ]
}

/// `RotateTrack`: positions about the first state, velocities and headings by `angle`.
fn rotate_track(track: &[TrackState], angle: f64) -> Vec<TrackState> {
    let origin = [f64::from(track[0].x), f64::from(track[0].y)];
    track
        .iter()
        .map(|state| {
            let offset = [
                f64::from(state.x) - origin[0],
                f64::from(state.y) - origin[1],
            ];
            let moved = rotate(offset, angle);
            let velocity = rotate(
                [f64::from(state.velocity_x), f64::from(state.velocity_y)],
                angle,
            );
            TrackState {
                x: (moved[0] + origin[0]) as f32,
                y: (moved[1] + origin[1]) as f32,
                heading: (f64::from(state.heading) + angle) as f32,
                velocity_x: velocity[0] as f32,
                velocity_y: velocity[1] as f32,
            }
        })
        .collect()
}

fn classify(track: &[TrackState]) -> Option<TrajectoryType> {
    TrajectoryType::of_track(track, &vec![true; track.len()], 1)
}

/// `TestTrackClassification`.
fn assert_classified(points: &[[f64; 2]], expected: TrajectoryType) {
    let track = track_from_points(points);
    assert_eq!(classify(&track), Some(expected), "track");
    assert_eq!(
        classify(&rotate_track(&track, 0.52)),
        Some(expected),
        "rotated 0.52"
    );
    assert_eq!(
        classify(&rotate_track(&track, -1.0)),
        Some(expected),
        "rotated -1.0"
    );
    let mut angle = -std::f64::consts::PI;
    while angle <= std::f64::consts::PI {
        let rotated: Vec<[f64; 2]> = points.iter().map(|&p| rotate(p, angle)).collect();
        assert_eq!(
            classify(&track_from_points(&rotated)),
            Some(expected),
            "points rotated by {angle}"
        );
        angle += std::f64::consts::PI / 32.0;
    }
}

#[test]
fn classify_track_stationary() {
    let points = [[0.0, 0.0], [0.0, 0.1], [0.0, 0.2], [0.0, 0.3], [0.0, 0.4]];
    assert_classified(&points, TrajectoryType::Stationary);
}

#[test]
fn classify_track_straight() {
    let points = [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]];
    assert_classified(&points, TrajectoryType::Straight);
}

#[test]
fn classify_track_semi_straight_across_pi_boundary() {
    let points = [
        [0.0, 0.0],
        [-1.0, 0.05],
        [-2.0, 0.0],
        [-3.0, -0.5],
        [-4.0, -0.5],
    ];
    assert_classified(&points, TrajectoryType::Straight);
}

#[test]
fn classify_track_straight_left() {
    let points = [
        [0.0, 0.0],
        [0.0, 2.0],
        [0.0, 4.0],
        [-0.5, 6.0],
        [-1.5, 8.0],
        [-2.0, 10.0],
        [-2.5, 12.0],
        [-3.0, 14.0],
        [-4.0, 16.0],
        [-5.0, 18.0],
        [-5.5, 20.0],
    ];
    assert_classified(&points, TrajectoryType::StraightLeft);
}

#[test]
fn classify_track_straight_right() {
    let points = [
        [0.0, 0.0],
        [0.0, 2.0],
        [0.0, 4.0],
        [0.5, 6.0],
        [1.5, 8.0],
        [2.0, 10.0],
        [2.5, 12.0],
        [3.0, 14.0],
        [4.0, 16.0],
        [5.0, 18.0],
        [5.5, 20.0],
    ];
    assert_classified(&points, TrajectoryType::StraightRight);
}

#[test]
fn classify_track_right() {
    let points = [
        [0.0, 0.0],
        [0.0, 2.0],
        [0.0, 4.0],
        [0.5, 6.0],
        [2.0, 8.0],
        [4.0, 10.0],
        [6.0, 12.0],
        [8.0, 14.0],
        [10.0, 16.0],
        [12.0, 18.0],
        [14.0, 20.0],
    ];
    assert_classified(&points, TrajectoryType::RightTurn);
}

#[test]
fn classify_track_left() {
    let points = [
        [0.0, 0.0],
        [0.0, 2.0],
        [0.0, 4.0],
        [-0.5, 6.0],
        [-2.0, 8.0],
        [-4.0, 10.0],
        [-6.0, 12.0],
        [-8.0, 14.0],
        [-10.0, 16.0],
        [-12.0, 18.0],
        [-14.0, 20.0],
    ];
    assert_classified(&points, TrajectoryType::LeftTurn);
}

#[test]
fn classify_track_left_u_turn() {
    let points = [
        [0.0, 0.0],
        [-2.0, 2.0],
        [-2.0, 4.0],
        [-4.0, 4.0],
        [-6.0, 2.0],
        [-7.0, 0.0],
        [-8.0, -2.0],
        [-9.0, -4.0],
        [-10.0, -6.0],
        [-12.0, -8.0],
        [-14.0, -10.0],
    ];
    assert_classified(&points, TrajectoryType::LeftUTurn);
}

/// The 180-degree turns share their first eight points and differ in the last three.
fn half_circle(mirror: f64, tail: [[f64; 2]; 3]) -> Vec<[f64; 2]> {
    let head = [
        [0.0, 0.0],
        [-2.0, 0.0],
        [-4.0, 0.0],
        [-6.0, -2.0],
        [-6.0, -4.0],
        [-4.0, -6.0],
        [-2.0, -8.0],
        [0.0, -10.0],
    ];
    head.iter()
        .chain(&tail)
        .map(|&[x, y]| [x, y * mirror])
        .collect()
}

#[test]
fn classify_track_left_u_turns_of_about_180_degrees() {
    let tails = [
        [[2.0, -10.0], [4.0, -10.0], [6.0, -10.0]], // LeftUTurn180Deg
        [[2.0, -10.0], [4.0, -9.0], [6.0, -8.0]],   // LeftUTurnGT180Deg
        [[2.0, -10.0], [4.0, -10.0], [6.0, -11.0]], // LeftUTurnLT180Deg
    ];
    for tail in tails {
        assert_classified(&half_circle(1.0, tail), TrajectoryType::LeftUTurn);
    }
}

#[test]
fn classify_track_right_u_turns_of_about_180_degrees() {
    // The C++ right-turn cases are the left ones mirrored in y: (2, 10), (4, 10), (6, 10);
    // (4, 9), (6, 8); (4, 11), (6, 12).
    let tails = [
        [[2.0, -10.0], [4.0, -10.0], [6.0, -10.0]],
        [[2.0, -10.0], [4.0, -9.0], [6.0, -8.0]],
        [[2.0, -10.0], [4.0, -11.0], [6.0, -12.0]],
    ];
    for tail in tails {
        assert_classified(&half_circle(-1.0, tail), TrajectoryType::RightUTurn);
    }
}

#[test]
fn classify_track_right_u_turn() {
    let points = [
        [0.0, 0.0],
        [2.0, 2.0],
        [2.0, 4.0],
        [4.0, 4.0],
        [6.0, 2.0],
        [7.0, 0.0],
        [8.0, -2.0],
        [9.0, -4.0],
        [10.0, -6.0],
        [12.0, -8.0],
        [14.0, -10.0],
    ];
    assert_classified(&points, TrajectoryType::RightUTurn);
}

#[test]
fn a_track_without_a_valid_future_or_current_state_has_no_type() {
    let track = track_from_points(&[[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]]);
    assert_eq!(
        TrajectoryType::of_track(&track, &[true, true, false], 1),
        None
    );
    assert_eq!(
        TrajectoryType::of_track(&track, &[true, false, true], 1),
        None
    );
    assert_eq!(
        TrajectoryType::of_track(&track, &[false, true, true], 1),
        Some(TrajectoryType::Straight)
    );
}
