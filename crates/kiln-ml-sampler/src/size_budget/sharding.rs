//! Size-budget batches cut over ranks: rank `r` takes the `r`-th batch of each run of `world`.

use kiln_ml_core::{BlockLayout, Error, Plan, PlanRequest, Result};

use super::budget::BudgetBatches;
use crate::sharding::RemainderPolicy;

/// The plan of the requested rank: its batches, where they end, and the global samples consumed
/// at the end of each run. A last run of fewer than `world` batches is dropped, padded with the
/// last full run's batches again (last first; the epoch's last batches when there is no full
/// run), or left short, by `remainder`.
pub(crate) fn shard_batches(
    batches: BudgetBatches,
    remainder: RemainderPolicy,
    layout: &dyn BlockLayout,
    request: &PlanRequest,
) -> Result<Plan> {
    let world = u64::from(request.shard.world());
    let rank = u64::from(request.shard.rank());
    let count = batches.ends.len() as u64;
    let runs = match remainder {
        RemainderPolicy::Drop => count / world,
        RemainderPolicy::Pad | RemainderPolicy::Uneven => count.div_ceil(world),
    };
    if runs == 0 {
        return Err(Error::InvalidConfig(format!(
            "the epoch makes {count} size-budget batches, fewer than the {world} ranks: \
             lower the budget or use RemainderPolicy::Pad"
        )));
    }
    let (mut order, mut ends, mut global_ends) = (Vec::new(), Vec::new(), Vec::new());
    let mut consumed = 0u64;
    for run in 0..runs {
        for member in 0..world {
            let index = run * world + member;
            let batch = match remainder {
                _ if index < count => index,
                // The last full run's batches again, last first: their blocks are the ones the
                // epoch's end reads anyway, and none is in the short run beside them (a batch
                // twice in one step would weigh double in its gradient).
                RemainderPolicy::Pad if count >= world => {
                    count - count % world - 1 - (index - count) % world
                }
                // Fewer batches than ranks: repeats in the one step cannot be helped.
                RemainderPolicy::Pad => count - 1 - (index - count) % count,
                _ => continue,
            };
            let range = batches.range(batch as usize);
            consumed += range.len() as u64;
            if member == rank {
                order.extend_from_slice(&batches.order[range]);
                ends.push(order.len() as u64);
            }
        }
        if ends.len() as u64 > global_ends.len() as u64 {
            global_ends.push(consumed);
        }
    }
    Plan::with_batch_ends(
        request.epoch,
        request.shard,
        order,
        ends,
        global_ends,
        layout,
    )
}

#[cfg(test)]
mod tests {
    use kiln_ml_core::{Fingerprint, Layout, Position, Shard};

    use super::*;

    /// Five batches of 1, 2, 3, 4 and 5 samples over ids 0..15.
    fn batches() -> BudgetBatches {
        BudgetBatches {
            order: (0..15).collect(),
            ends: vec![1, 3, 6, 10, 15],
        }
    }

    fn layout() -> Layout {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"f"), &[15]);
        builder.build().unwrap()
    }

    fn plan(remainder: RemainderPolicy, rank: u32) -> Plan {
        let request = PlanRequest::new(0, 0).with_shard(Shard::new(rank, 2).unwrap());
        shard_batches(batches(), remainder, &layout(), &request).unwrap()
    }

    #[test]
    fn ranks_take_alternate_batches_and_resume_at_run_ends() {
        let rank0 = plan(RemainderPolicy::Drop, 0);
        let rank1 = plan(RemainderPolicy::Drop, 1);
        assert_eq!(rank0.order(), &[0, 3, 4, 5]);
        assert_eq!(rank1.order(), &[1, 2, 6, 7, 8, 9]);
        // Runs end after 3 and 10 global samples, on both ranks.
        assert_eq!(rank0.position_after(1).unwrap().consumed, 3);
        assert_eq!(rank1.position_after(2).unwrap().consumed, 3);
        let at = Position {
            epoch: 0,
            consumed: 3,
        };
        assert_eq!(rank1.skip_to(at).unwrap().order(), &[6, 7, 8, 9]);
    }

    #[test]
    fn the_last_run_is_dropped_padded_or_left_short() {
        // Rank 1's last batch is batch 3 again (the last full run's last), not batch 4, which
        // rank 0 trains in the same step.
        assert_eq!(
            plan(RemainderPolicy::Pad, 1).order(),
            &[1, 2, 6, 7, 8, 9, 6, 7, 8, 9]
        );
        // Four ranks, one batch in the last run: the other three are the full run's, distinct.
        let request = PlanRequest::new(0, 0);
        let last_run: Vec<Vec<u64>> = (0..4)
            .map(|rank| {
                let request = request.with_shard(Shard::new(rank, 4).unwrap());
                let plan =
                    shard_batches(batches(), RemainderPolicy::Pad, &layout(), &request).unwrap();
                plan.order()[plan.batch_range(1).start as usize..].to_vec()
            })
            .collect();
        assert_eq!(
            last_run,
            [
                vec![10, 11, 12, 13, 14],
                vec![6, 7, 8, 9],
                vec![3, 4, 5],
                vec![1, 2]
            ]
        );
        assert_eq!(plan(RemainderPolicy::Uneven, 0).batch_count(), 3);
        assert_eq!(plan(RemainderPolicy::Uneven, 1).batch_count(), 2);
        let request = PlanRequest::new(0, 0).with_shard(Shard::new(0, 8).unwrap());
        let error =
            shard_batches(batches(), RemainderPolicy::Drop, &layout(), &request).unwrap_err();
        assert!(
            error.to_string().contains("fewer than the 8 ranks"),
            "{error}"
        );
    }
}
