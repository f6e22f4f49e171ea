//! Parquet block sources, caches and the prefetching loader (work in progress: see issue 4).
