//! Shuffle-quality measures (work in progress).
