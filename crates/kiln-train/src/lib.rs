//! The kiln training loop (work in progress: see issue 6).
