//! Global orders of your own for tests: built from the layout's sample count alone, with the
//! flaws (a missing or repeated sample) that the samplers must refuse.

use kiln_ml_core::{BlockLayout, Result, SampleId};

use crate::GlobalOrder;

/// The order `build(samples)`, whatever the seed and epoch.
pub(crate) struct OrderFn(pub(crate) fn(u64) -> Vec<SampleId>);

impl GlobalOrder for OrderFn {
    fn global_order(&self, layout: &dyn BlockLayout, _: u64, _: u64) -> Result<Vec<SampleId>> {
        Ok((self.0)(layout.num_samples()))
    }
}
