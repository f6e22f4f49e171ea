//! The data side of both pipelines: a generated dataset read block by block through kiln-ml-data's
//! loader, with a preprocessing cost per sample that makes one pipeline input-bound.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use kiln_ml::core::{Block, BlockIndex, BlockLayout, BlockSource, Fingerprint, Layout};

use kiln_ml_examples::regressor::Row;

/// Rows generated on the fly, `rows_per_block` per block, with `cost_per_sample` of CPU work
/// per row to stand in for expensive preprocessing (feature extraction, graph building).
pub struct SyntheticSource {
    layout: Layout,
    cost_per_sample: Duration,
}

impl SyntheticSource {
    /// `samples` rows in blocks of `rows_per_block`, each costing `cost_per_sample` to read.
    pub fn new(
        samples: u64,
        rows_per_block: u64,
        cost_per_sample: Duration,
    ) -> anyhow::Result<Self> {
        let mut blocks = vec![rows_per_block; (samples / rows_per_block) as usize];
        if !samples.is_multiple_of(rows_per_block) {
            blocks.push(samples % rows_per_block);
        }
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"diagnose/synthetic"), &blocks);
        Ok(Self {
            layout: builder.build()?,
            cost_per_sample,
        })
    }
}

impl BlockLayout for SyntheticSource {
    fn blocks(&self) -> &[Block] {
        self.layout.blocks()
    }

    fn fingerprint(&self) -> Fingerprint {
        self.layout.fingerprint()
    }
}

impl BlockSource for SyntheticSource {
    type Item = Row;
    type Error = Infallible;

    fn read_block(&self, block: BlockIndex) -> Result<Vec<Row>, Infallible> {
        let samples = self.layout.blocks()[block as usize].samples();
        Ok(samples
            .map(|id| {
                preprocess(self.cost_per_sample);
                Row::synthetic(id)
            })
            .collect())
    }
}

/// Burns `cost` of CPU time, as a heavy transform would (a sleep would leave the core free).
fn preprocess(cost: Duration) {
    if cost.is_zero() {
        return;
    }
    let started = Instant::now();
    let mut state = 0u64;
    while started.elapsed() < cost {
        for _ in 0..256 {
            state = std::hint::black_box(state.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}
