//! Trajectory-forecasting metrics (work in progress: see issue 5).
