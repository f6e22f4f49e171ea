//! The tensor path: every metric reduced on the device, one small read-back per batch.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use crate::config::MetricsConfig;
use crate::policy::{ModeSelection, Pruning, TieOrder, ZeroMass};
use crate::sums::{Mean, MetricSums};
use crate::tensor::TensorTrajectoryBatch;
use crate::tensor::locate::{Check, checks, locate_error};
use crate::tensor::mode_errors::{DeviceErrors, Displacements, horizon_errors};
use crate::{Error, Result};

/// Per-prediction rows are summed in blocks of this many on the device; the host adds the
/// block sums in `f64`, which keeps `f32` rounding near that of the host path.
const BLOCK: usize = 256;

/// Measures one batch on its device and returns its sums (or the first invalid value): one
/// read-back.
pub(crate) fn measure_tensors<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
) -> Result<MetricSums> {
    let launched = launch(config, batch)?;
    let totals = match &launched.block_sums {
        Some(partial) => {
            let data = partial
                .clone()
                .try_into_data()
                .map_err(|error| Error::Device {
                    reason: error.to_string(),
                })?;
            launched.totals(&data.iter::<f64>().collect::<Vec<_>>())
        }
        None => Vec::new(),
    };
    launched.finish(config, batch, &totals)
}

/// A batch's measurement queued on its device, not read back yet: the block sums of its rows
/// (`None` for an empty batch) and what the host needs to turn their totals into sums.
#[derive(Clone)]
pub(crate) struct Launched<B: Backend> {
    /// `[rows, blocks]`: each row summed in blocks of [`BLOCK`] predictions.
    pub(crate) block_sums: Option<Tensor<B, 2>>,
    units: usize,
    per_prediction: usize,
    checks: Vec<Check<B>>,
    slots: Vec<Slot>,
    sums: MetricSums,
}

impl<B: Backend> Launched<B> {
    /// One total per row from the block sums read back (`[rows, blocks]`, row-major), added
    /// in `f64`.
    pub(crate) fn totals(&self, block_sums: &[f64]) -> Vec<f64> {
        let blocks = self.units.div_ceil(BLOCK).max(1);
        block_sums
            .chunks_exact(blocks)
            .map(|row| row.iter().sum())
            .collect()
    }

    /// The batch's sums from its row totals, or the first invalid value (located in `batch`).
    pub(crate) fn finish(
        self,
        config: &MetricsConfig,
        batch: &TensorTrajectoryBatch<B>,
        totals: &[f64],
    ) -> Result<MetricSums> {
        let Launched {
            units,
            per_prediction,
            checks,
            slots,
            mut sums,
            ..
        } = self;
        if units == 0 {
            return Ok(sums);
        }
        for (check, &flagged) in checks.iter().zip(totals) {
            if flagged > 0.0
                && let Some(error) = locate_error(config, batch, check)
            {
                return Err(error);
            }
        }
        for horizon in &mut sums.horizons {
            horizon.units = units as u64;
        }
        for (&slot, pair) in slots.iter().zip(totals[checks.len()..].chunks_exact(2)) {
            let units = pair[1].round() as u64;
            let count = match slot {
                Slot::ActorMiss(..) => units * per_prediction as u64,
                _ => units,
            };
            if let Some(mean) = mean_at(&mut sums, slot) {
                *mean = Mean {
                    sum: pair[0],
                    count,
                };
            }
        }
        Ok(sums)
    }
}

/// Queues one batch's measurement on its device (see [`Launched`]); checks shapes and the
/// configuration on the host first.
pub(crate) fn launch<B: Backend>(
    config: &MetricsConfig,
    batch: &TensorTrajectoryBatch<B>,
) -> Result<Launched<B>> {
    let (n, k, steps) = (batch.agents(), batch.modes(), batch.steps());
    let per_prediction = config.agents_per_prediction;
    if !n.is_multiple_of(per_prediction) {
        return Err(Error::AgentsNotGroupable {
            agents: n,
            agents_per_prediction: per_prediction,
        });
    }
    let units = n / per_prediction;
    if let Some(p) = &batch.probabilities
        && p.dims()[0] != units
    {
        return Err(Error::ShapeMismatch {
            field: "probabilities",
            expected: format!("[{units}, {k}] (one row per prediction)"),
            actual: format!("{:?}", p.dims()),
        });
    }
    if config.needs_motion() {
        for (field, present) in [
            ("velocity", batch.velocity.is_some()),
            ("heading", batch.heading.is_some()),
        ] {
            if !present {
                return Err(Error::MissingInput {
                    field,
                    needed_by: "the lateral/longitudinal miss rule",
                });
            }
        }
    }
    let last_steps = config
        .horizons
        .iter()
        .enumerate()
        .map(|(index, horizon)| horizon.resolve(index, steps))
        .collect::<Result<Vec<_>>>()?;
    let sums = MetricSums::for_config(config);
    if units == 0 {
        return Ok(Launched {
            block_sums: None,
            units,
            per_prediction,
            checks: Vec::new(),
            slots: Vec::new(),
            sums,
        });
    }

    let checks = checks(config, batch);
    let mut rows: Vec<Tensor<B, 1>> = checks.iter().map(|check| check.flags.clone()).collect();
    let mut slots: Vec<Slot> = Vec::new();

    let used = last_steps.iter().copied().max().unwrap_or(0) + 1;
    let shared = Displacements::new(batch, used);
    let rank = rank_modes(
        config.pruning,
        batch.probabilities.as_ref(),
        units,
        k,
        &batch.predictions.device(),
    );
    let kept_counts = config.kept_modes(k);
    // The most probable mode, the same at every horizon.
    let top = rank.clone().equal_elem(0.0).float();
    for (h, &last_step) in last_steps.iter().enumerate() {
        let errors = horizon_errors(
            config,
            batch,
            &shared,
            last_step,
            config.horizons[h].miss_box,
        );
        let mut push = |value: Tensor<B, 2>, ok: &Tensor<B, 2>, slot: Slot| {
            rows.push((value * ok.clone()).reshape([units]));
            rows.push(ok.clone().reshape([units]));
            slots.push(slot);
        };
        push(
            (errors.ade.clone() * top.clone()).sum_dim(1),
            &errors.has_path,
            Slot::Ade(h),
        );
        push(
            (errors.fde.clone() * top.clone()).sum_dim(1),
            &errors.has_final,
            Slot::Fde(h),
        );
        for (index, &kept) in kept_counts.iter().enumerate() {
            let values = select(config, &errors, &rank, kept, batch.probabilities.as_ref());
            for (metric, (value, ok)) in values.into_iter().enumerate() {
                let slot = if metric == ACTOR_MISS {
                    Slot::ActorMiss(h, index)
                } else {
                    Slot::TopK(h, index, metric)
                };
                push(value, &ok, slot);
            }
        }
    }

    Ok(Launched {
        block_sums: Some(block_sums(rows, units)),
        units,
        per_prediction,
        checks,
        slots,
        sums,
    })
}

/// Where a pair of (value, count) rows goes in the sums.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Ade(usize),
    Fde(usize),
    /// Horizon, K index, position in `TopKSums::means_mut`.
    TopK(usize, usize, usize),
    /// Horizon, K index: the actor miss rate, whose count is per agent.
    ActorMiss(usize, usize),
}

/// Position of the actor miss rate in `TopKSums::means_mut` (and in `select`'s values).
const ACTOR_MISS: usize = 8;

fn mean_at(sums: &mut MetricSums, slot: Slot) -> Option<&mut Mean> {
    match slot {
        Slot::Ade(h) => Some(&mut sums.horizons[h].ade),
        Slot::Fde(h) => Some(&mut sums.horizons[h].fde),
        Slot::TopK(h, index, metric) => sums.horizons[h].top_k[index]
            .means_mut()
            .into_iter()
            .nth(metric),
        Slot::ActorMiss(h, index) => Some(&mut sums.horizons[h].top_k[index].actor_miss),
    }
}

/// Rank of each mode `[P, K]` as floats: 0 for the best-ranked.
fn rank_modes<B: Backend>(
    pruning: Pruning,
    probabilities: Option<&Tensor<B, 2>>,
    units: usize,
    k: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let submission = || {
        Tensor::<B, 1, Int>::arange(0..k as i64, device)
            .float()
            .reshape([1, k])
            .expand([units, k])
    };
    let (Pruning::ByProbability { ties }, Some(p)) = (pruning, probabilities) else {
        return submission();
    };
    // rank[a] = #{b: p[b] > p[a]} + #{b ranked before a among equal p}: a stable order without a sort.
    let mine = p.clone().unsqueeze_dim::<3>(2).expand([units, k, k]);
    let others = p.clone().unsqueeze_dim::<3>(1).expand([units, k, k]);
    let before: Vec<bool> = (0..k)
        .flat_map(|a| {
            (0..k).map(move |b| match ties {
                TieOrder::LowerIndexFirst => b < a,
                TieOrder::HigherIndexFirst => b > a,
            })
        })
        .collect();
    let before = Tensor::<B, 3, Bool>::from_data(TensorData::new(before, [1, k, k]), device)
        .expand([units, k, k]);
    let higher = others.clone().greater(mine.clone()).float().sum_dim(2);
    let tied_before = others.equal(mine).bool_and(before).float().sum_dim(2);
    (higher + tied_before).reshape([units, k])
}

/// The nine `TopKSums` values of one K as (value, ok) pairs, in `means_mut` order.
fn select<B: Backend>(
    config: &MetricsConfig,
    errors: &DeviceErrors<B>,
    rank: &Tensor<B, 2>,
    kept: usize,
    probabilities: Option<&Tensor<B, 2>>,
) -> Vec<(Tensor<B, 2>, Tensor<B, 2>)> {
    let [units, k] = rank.dims();
    let dropped = rank.clone().greater_equal_elem(kept as f32);
    // The best kept mode by `values`, earliest rank on ties, as a one-hot [P, K] and its value.
    let best = |values: &Tensor<B, 2>| {
        let masked = values.clone().mask_fill(dropped.clone(), f32::INFINITY);
        let minimum = masked.clone().min_dim(1);
        let candidate = masked.equal(minimum.clone().expand([units, k]));
        let chosen = rank
            .clone()
            .mask_fill(candidate.bool_not(), k as f32)
            .min_dim(1);
        (
            rank.clone().equal(chosen.expand([units, k])).float(),
            minimum,
        )
    };
    let (fde_mode, min_fde) = best(&errors.fde);
    let (ade_mode, min_ade) = match config.selection {
        ModeSelection::MinFde => {
            let value = (errors.ade.clone() * fde_mode.clone()).sum_dim(1);
            (fde_mode.clone(), value)
        }
        ModeSelection::Independent => best(&errors.ade),
    };
    let missed = if config.miss_from_selected_mode() {
        (errors.miss.clone() * fde_mode.clone()).sum_dim(1)
    } else {
        errors
            .miss
            .clone()
            .mask_fill(dropped.clone(), 1.0)
            .min_dim(1)
    };
    let ade_ok = match config.selection {
        ModeSelection::MinFde => errors.has_final.clone(),
        ModeSelection::Independent => errors.has_path.clone(),
    };
    let fde_ok = errors.has_final.clone();
    let miss_needs_final = config.miss_needs_final();
    let miss_ok = if miss_needs_final {
        fde_ok.clone()
    } else {
        errors.has_path.clone()
    };

    let mut values = vec![
        (min_ade.clone(), ade_ok.clone()),
        (min_fde.clone(), fde_ok.clone()),
        (missed.clone(), miss_ok.clone()),
    ];
    let zero = || Tensor::<B, 2>::zeros([units, 1], &rank.device());
    match probabilities {
        Some(p) => {
            let policy = config.probabilities;
            let probability_of = |mode: &Tensor<B, 2>| {
                let p_mode = (p.clone() * mode.clone()).sum_dim(1);
                if policy.renormalize {
                    // Over the row's largest kept score first: scores need not sum to one
                    // (Waymo's may be any finite value), and an f32 sum of huge ones would
                    // overflow where the host's f64 sum does not.
                    let kept = p.clone().mask_fill(dropped.clone(), 0.0);
                    let top = kept.clone().max_dim(1);
                    let top = top.clone().mask_fill(top.lower_equal_elem(0.0), 1.0);
                    let kept_sum = (kept / top.clone()).sum_dim(1);
                    // As on the host: no kept mass (a sum that is not positive, which only
                    // negative scores give) gives 1/K (uniform) or 0, not 0/0.
                    let empty = kept_sum.clone().lower_equal_elem(0.0);
                    let renormalized = p_mode / top / kept_sum.mask_fill(empty.clone(), 1.0);
                    match policy.zero_mass {
                        // The limit, 0, as on the host (a negative kept sum under `Finite`
                        // would otherwise leave p_mode itself).
                        ZeroMass::Refuse => renormalized.mask_fill(empty, 0.0),
                        ZeroMass::Uniform => {
                            let kept_modes = dropped.clone().bool_not().float().sum_dim(1);
                            renormalized.mask_where(empty, kept_modes.recip())
                        }
                    }
                } else {
                    p_mode
                }
            };
            let (p_ade, p_fde) = (probability_of(&ade_mode), probability_of(&fde_mode));
            let brier = |p: Tensor<B, 2>| p.neg().add_scalar(1.0).powi_scalar(2);
            let penalty =
                |p: Tensor<B, 2>| p.clamp_min(policy.low_probability_floor as f32).log().neg();
            let p_miss = missed.clone()
                + (missed.neg().add_scalar(1.0)) * p_fde.clone().neg().add_scalar(1.0);
            values.extend([
                (min_ade.clone() + brier(p_ade.clone()), ade_ok.clone()),
                (min_fde.clone() + brier(p_fde.clone()), fde_ok.clone()),
                (min_ade + penalty(p_ade), ade_ok),
                (min_fde + penalty(p_fde), fde_ok.clone()),
                (p_miss, miss_ok * fde_ok.clone()),
            ]);
        }
        None => values.extend((0..5).map(|_| (zero(), zero()))),
    }
    // The actor miss rate: missing agents of the min-FDE hypothesis, counted per prediction
    // here and per agent when read back (`Slot::ActorMiss`).
    if config.agents_per_prediction > 1 {
        let misses = (errors.agent_misses.clone() * fde_mode).sum_dim(1);
        values.push((misses, fde_ok));
    } else {
        values.push((zero(), zero()));
    }
    values
}

/// Stacks the `[P]` rows and sums them in blocks of [`BLOCK`] on the device: `[rows, blocks]`.
/// The host adds the blocks in `f64` once they are read back ([`Launched::totals`]).
fn block_sums<B: Backend>(rows: Vec<Tensor<B, 1>>, units: usize) -> Tensor<B, 2> {
    let count = rows.len();
    let device = rows[0].device();
    let blocks = units.div_ceil(BLOCK);
    let mut stacked: Tensor<B, 2> = Tensor::stack(rows, 0);
    if blocks * BLOCK > units {
        let padding = Tensor::zeros([count, blocks * BLOCK - units], &device);
        stacked = Tensor::cat(vec![stacked, padding], 1);
    }
    stacked
        .reshape([count, blocks, BLOCK])
        .sum_dim(2)
        .reshape([count, blocks])
}
