//! Which file (or block) each position of an order reads: what the mixing measures count.

use kiln_ml_core::{BlockFinder, BlockLayout, Error, Result, SampleId};

use super::Grouping;

/// The group of every position of `order`, and the number of samples in every group.
pub(super) fn groups_of_order(
    layout: &dyn BlockLayout,
    order: &[SampleId],
    grouping: Grouping,
) -> Result<(Vec<u32>, Vec<u64>)> {
    let (group_of_block, sizes) = groups_of(layout, grouping);
    let samples = layout.num_samples();
    let mut groups = Vec::with_capacity(order.len());
    let finder = BlockFinder::new(layout.blocks());
    for (position, &sample) in order.iter().enumerate() {
        let block = finder.find(sample).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "quality: order position {position} names sample {sample}, but the layout has {samples} samples"
            ))
        })?;
        groups.push(group_of_block[block as usize]);
    }
    Ok((groups, sizes))
}

/// The group of every block and the number of samples in every group.
fn groups_of(layout: &dyn BlockLayout, grouping: Grouping) -> (Vec<u32>, Vec<u64>) {
    let blocks = layout.blocks();
    let group_of_block: Vec<u32> = match grouping {
        Grouping::File => blocks.iter().map(|block| block.file).collect(),
        Grouping::Block => (0..blocks.len() as u32).collect(),
    };
    let count = group_of_block
        .iter()
        .map(|&g| g as usize + 1)
        .max()
        .unwrap_or(0);
    let mut sizes = vec![0u64; count];
    for (block, &group) in blocks.iter().zip(&group_of_block) {
        sizes[group as usize] += block.rows;
    }
    (group_of_block, sizes)
}
