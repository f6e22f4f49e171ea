//! A trainer joins a data-parallel run as one of its replicas.

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;

use crate::grad_sync::{all_reduce_counts, broadcast_params};
use crate::replica::Membership;
use crate::{Error, Replica, Result, TrainStep, Trainer};

impl<B, M, O, S> Trainer<B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + TrainStep<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// Makes this trainer `replica` of a data-parallel run (inside
    /// [`DataParallel::run`](crate::DataParallel::run)), before training or loading a checkpoint.
    ///
    /// Every replica takes rank 0's weights (an all-reduce to which the others send zeros). From then on each optimizer step
    /// sums the gradients, losses and micro-batch (or item) counts of every replica and
    /// normalizes by the totals, so all replicas apply the same update; an f16 overflow on any
    /// replica skips the step on all. Each step reads the reduced statistics back once (the
    /// all-reduce is a meeting point of all replicas anyway). Only rank 0 writes the
    /// checkpoints `fit` takes; every replica resumes from the same file (`fit` checks it).
    ///
    /// Every replica must see the same number of batches per epoch (kiln's samplers with
    /// `RemainderPolicy::Drop` or `Pad`); at the end of an epoch a replica whose window is
    /// empty still takes part in the flushed step, with zero gradients.
    pub fn join(&mut self, replica: &Replica<B::Device>) -> Result<()> {
        if self.membership.is_some() {
            return Err(Error::InvalidDataParallel {
                reason: format!("the trainer already joined a run (rank {})", replica.rank()),
            });
        }
        if self.counters.micro_batches > 0 || !self.window.is_empty() {
            return Err(Error::InvalidDataParallel {
                reason: format!(
                    "replica {} joins a trainer that already trained {} micro-batches: join before \
                     training (load checkpoints after joining)",
                    replica.rank(),
                    self.counters.micro_batches
                ),
            });
        }
        if replica.device() != &self.device {
            return Err(Error::InvalidDataParallel {
                reason: format!(
                    "replica {} runs on {:?}, but the trainer was built on {:?}",
                    replica.rank(),
                    replica.device(),
                    self.device
                ),
            });
        }
        let membership = Membership {
            collective: replica.collective(),
            rank: replica.rank(),
            world: replica.world(),
        };
        self.check_agreement(&membership)?;
        // A clone shares the tensors; the trainer keeps its model if the broadcast fails.
        let model = broadcast_params::<B, M>(
            self.model().clone(),
            &membership.collective,
            replica.is_main(),
        )
        .map_err(|message| membership.error("the broadcast of rank 0's weights", message))?;
        self.model = Some(model);
        self.model_generation = crate::step_hints::fresh_generation();
        // Each replica draws its own host randomness (augmentation of its own batches): the
        // rank's ChaCha stream, so rank 0 draws what a single trainer would.
        self.host_rng.set_stream(u64::from(membership.rank));
        self.membership = Some(membership);
        Ok(())
    }

    /// Fails unless every replica built the same trainer: the settings that shape the update
    /// and the collective calls, and the parameter shapes (one all-reduce; see
    /// `agreement.rs`), and counts the world this replica was told.
    fn check_agreement(&self, membership: &Membership) -> Result<()> {
        let config = &self.config;
        let shared = (
            config.num_epochs,
            config.precision,
            &config.precision_policy,
            &config.loss_scaler,
            config.accumulation_steps,
            config.loss_normalization,
            config.clipping,
            config.max_steps,
            config.max_batches_per_epoch,
            config.overfit_batches,
            // One replica stopping on an anomaly, or refusing a resume on changed data, while
            // the others go on would leave them waiting in their next all-reduce.
            config.detect_anomalies,
            config.resume_on_changed_data,
            crate::param_shapes::param_shapes::<B, M>(self.model()),
        );
        self.check_replicas_agree(
            membership,
            &shared,
            "the all-reduce that checks the replicas agree",
            || {
                "the replicas built different trainers: every replica needs the same precision, \
                 precision policy, loss scaler, accumulation, loss normalization, clipping, \
                 epochs and step limits, anomaly detection, resume_on_changed_data, and a model \
                 of the same parameter shapes"
                    .to_owned()
            },
        )
    }

    /// Under data parallelism, fails unless every replica starts `fit` from the same state:
    /// the same checkpoint loaded (by its checksum; or none), the same optimizer step, micro-batch
    /// count, epoch and position in it (one all-reduce, as at `join`). Replicas that resumed
    /// from different files, or some from none, would otherwise train different weights with
    /// the same summed gradients, or make different collective calls and hang.
    pub(crate) fn check_same_start(&self) -> Result<()> {
        let Some(membership) = &self.membership else {
            return Ok(());
        };
        let start = (
            self.loaded_checkpoint,
            self.counters.optimizer_steps,
            self.counters.micro_batches,
            self.epoch,
            self.position,
        );
        self.check_replicas_agree(
            membership,
            &start,
            "the all-reduce that checks the replicas start from the same state",
            || {
                let loaded = match self.loaded_checkpoint {
                    Some(checksum) => format!("the checkpoint with checksum {checksum}"),
                    None => "no checkpoint".to_owned(),
                };
                format!(
                    "the replicas start `fit` from different states: this one loaded {loaded} \
                     and stands at optimizer step {}, epoch {} after {} samples. Load the same \
                     checkpoint on every replica, after `join` (or none on any)",
                    self.counters.optimizer_steps, self.position.epoch, self.position.consumed
                )
            },
        )
    }

    /// One all-reduce that fails unless every replica holds the same `shared` value (compared by
    /// a 64-bit fingerprint; see `agreement.rs`) and counts the world this replica was told.
    /// `during` names the call in a collective error; `differs` says what a different value
    /// means, for this replica's error.
    fn check_replicas_agree<T: serde::Serialize>(
        &self,
        membership: &Membership,
        shared: &T,
        during: &'static str,
        differs: impl FnOnce() -> String,
    ) -> Result<()> {
        let bytes = serde_json::to_vec(shared).expect("the compared state serializes");
        let fingerprint = kiln_ml_core::Fingerprint::of_bytes(&bytes).as_u128() as u64;
        let sums = all_reduce_counts::<B::InnerBackend, { crate::agreement::VALUES }>(
            &membership.collective,
            crate::agreement::values(fingerprint),
            &self.device,
        )
        .map_err(|message| membership.error(during, message))?;
        crate::agreement::check(&sums, fingerprint, membership.world).map_err(|disagreement| {
            Error::InvalidDataParallel {
                reason: format!(
                    "replica {}: {}",
                    membership.rank,
                    disagreement.describe(membership.world, &differs())
                ),
            }
        })
    }

    /// [`join`](Self::join), builder style.
    pub fn joined(mut self, replica: &Replica<B::Device>) -> Result<Self> {
        self.join(replica)?;
        Ok(self)
    }

    /// This trainer's rank and the world size, once it joined a data-parallel run.
    pub fn data_parallel_rank(&self) -> Option<(u32, u32)> {
        self.membership
            .as_ref()
            .map(|membership| (membership.rank, membership.world))
    }

    /// Whether this trainer writes the checkpoints `fit` takes: rank 0, or a single trainer.
    pub(crate) fn writes_checkpoints(&self) -> bool {
        self.membership
            .as_ref()
            .is_none_or(|membership| membership.rank == 0)
    }
}
