//! Epoch plans over data that lives in many files (work in progress: see issue 3).
