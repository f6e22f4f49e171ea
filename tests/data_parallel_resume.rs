//! Elastic resume, end to end: a data-parallel run checkpointed mid-epoch on W replicas
//! resumes on W' replicas (2 → 1 and 1 → 2, the global batch kept) and delivers exactly the
//! samples of the uninterrupted run, in its order, none twice; the checkpoint is written once.

use std::sync::Mutex;

use burn::optim::SgdConfig;
use kiln_ml::backend::CpuAutodiff;
use kiln_ml::core::{PlanRequest, Position, PositionedBatches, Shard};
use kiln_ml::data::{LoaderConfig, collate_fn};
use kiln_ml::sampler::{BlockShuffleConfig, RemainderPolicy};
use kiln_ml::train::{CheckpointConfig, DataParallel, Trainer, TrainerConfig, latest_checkpoint};
use kiln_ml_testkit::{MemorySource, Mlp, MlpConfig, RegressionBatch, TEACHER_INPUTS};

type B = CpuAutodiff;

/// Samples per optimizer step, all replicas together.
const GLOBAL_BATCH: u64 = 8;
const EPOCHS: u64 = 2;
/// 6 global batches per epoch: the cut falls inside epoch 0.
const CUT_AT_STEP: u64 = 4;
const SEED: u64 = 5;

/// 48 samples in 4 files of uneven blocks.
fn source() -> MemorySource<u64> {
    MemorySource::with_ids(&[&[6, 6], &[10, 6], &[8, 6], &[6]])
}

/// Features and target of a sample, a pure function of its id.
fn row(id: u64) -> ([f32; TEACHER_INPUTS], f32) {
    let x = |k: u64| (((id * 7 + k * 13) % 17) as f32 / 8.5) - 1.0;
    let features = [x(0), x(1), x(2), x(3)];
    let target = 0.5 * features[0] - features[1] + 2.0 * features[2] + 0.25 * features[3];
    (features, target)
}

/// A batch that remembers its sample ids, so the test sees what was trained on.
fn collate(ids: Vec<u64>) -> (Vec<u64>, RegressionBatch<B>) {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for &id in &ids {
        let (features, target) = row(id);
        inputs.extend(features);
        targets.push(target);
    }
    let batch = RegressionBatch::from_rows(&inputs, &targets, &Default::default());
    (ids, batch)
}

/// The batches one replica trained on: `(epoch, sample ids)` in order.
type Batches = Vec<(u64, Vec<u64>)>;
/// A replica's batches, written by its thread.
type Log = Mutex<Batches>;

/// An epoch's batches, logging each batch's ids as the trainer takes it.
struct Logged<'a, I> {
    batches: I,
    epoch: u64,
    log: &'a Log,
}

impl<I, E> Iterator for Logged<'_, I>
where
    I: Iterator<Item = Result<(Vec<u64>, RegressionBatch<B>), E>>,
{
    type Item = Result<RegressionBatch<B>, E>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.batches.next()?;
        Some(next.map(|(ids, batch)| {
            self.log.lock().unwrap().push((self.epoch, ids));
            batch
        }))
    }
}

impl<I, E> PositionedBatches for Logged<'_, I>
where
    I: PositionedBatches<Item = Result<(Vec<u64>, RegressionBatch<B>), E>>,
{
    fn position(&self) -> Position {
        self.batches.position()
    }
    fn last_batch_samples(&self) -> u64 {
        self.batches.last_batch_samples()
    }
    fn data_key(&self) -> Option<kiln_ml::core::Fingerprint> {
        self.batches.data_key()
    }
}

fn config(directory: &std::path::Path, max_steps: Option<u64>) -> TrainerConfig {
    TrainerConfig::new()
        .with_num_epochs(EPOCHS)
        .with_max_steps(max_steps)
        .with_checkpoint(Some(CheckpointConfig {
            at_epoch_end: false,
            ..CheckpointConfig::new(directory).with_every_steps(CUT_AT_STEP)
        }))
}

fn trainer(
    config: TrainerConfig,
    seed: u64,
) -> Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B>, f64> {
    let model = MlpConfig::new(TEACHER_INPUTS, &[8], 1)
        .with_seed(seed)
        .init(&Default::default());
    config
        .init(model, SgdConfig::new().init(), 0.05, Default::default())
        .unwrap()
}

/// Trains on `world` replicas (batch `GLOBAL_BATCH / world` each), from the latest checkpoint
/// in `directory` when there is one; returns each replica's log and rank 0's parameters.
fn run(
    world: u32,
    directory: &std::path::Path,
    max_steps: Option<u64>,
) -> (Vec<Batches>, Vec<f32>) {
    let batch = GLOBAL_BATCH / u64::from(world);
    let logs: Vec<Log> = (0..world).map(|_| Mutex::new(Vec::new())).collect();
    let resume_from = latest_checkpoint(directory).unwrap();
    let params = DataParallel::local()
        .run::<B, _, _>(vec![Default::default(); world as usize], |replica| {
            let mut trainer = trainer(config(directory, max_steps), 1 + u64::from(replica.rank()))
                .joined(&replica)?;
            if let Some(path) = &resume_from {
                trainer.load_checkpoint(path)?;
            }
            let loader = LoaderConfig::new()
                .with_workers(2)
                .init(source(), collate_fn(collate))
                .unwrap();
            let sampler = BlockShuffleConfig::default()
                .with_batch_size(batch)
                .with_remainder(RemainderPolicy::Drop)
                .init()
                .unwrap();
            let shard: Shard = replica.shard();
            let log = &logs[replica.rank() as usize];
            trainer.fit(|position| {
                let request = PlanRequest::new(SEED, position.epoch).with_shard(shard);
                loader
                    .resume_epoch(&sampler, &request, position)
                    .map(|batches| Logged {
                        batches,
                        epoch: position.epoch,
                        log,
                    })
            })?;
            Ok(trainer.model().params())
        })
        .unwrap();
    let logs = logs
        .into_iter()
        .map(|log| log.into_inner().unwrap())
        .collect();
    (logs, params.into_iter().next().unwrap())
}

/// The global order the replicas' logs make: global batch k is rank 0's k-th batch, then rank
/// 1's, and so on (kiln's sharding rule).
fn global_order(logs: &[Batches]) -> Vec<(u64, u64)> {
    let batches = logs[0].len();
    assert!(
        logs.iter().all(|log| log.len() == batches),
        "every replica trained as many batches"
    );
    (0..batches)
        .flat_map(|k| {
            logs.iter().flat_map(move |log| {
                let (epoch, ids) = &log[k];
                ids.iter().map(move |id| (*epoch, *id))
            })
        })
        .collect()
}

fn resume_on_another_world(before: u32, after: u32) {
    let reference = tempfile::tempdir().unwrap();
    let (whole, whole_params) = run(1, reference.path(), None);
    let whole = global_order(&whole);
    assert_eq!(whole.len() as u64, EPOCHS * 48, "two epochs of 48 samples");

    let directory = tempfile::tempdir().unwrap();
    let (first, _) = run(before, directory.path(), Some(CUT_AT_STEP));
    let checkpoints = std::fs::read_dir(directory.path()).unwrap().count();
    assert_eq!(checkpoints, 1, "rank 0 alone wrote the checkpoint");
    let (second, params) = run(after, directory.path(), None);

    let mut delivered = global_order(&first);
    assert_eq!(delivered.len() as u64, CUT_AT_STEP * GLOBAL_BATCH);
    delivered.extend(global_order(&second));
    assert_eq!(
        delivered, whole,
        "{before} → {after} replicas: the uninterrupted order, none twice"
    );
    let diff = params
        .iter()
        .zip(&whole_params)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff <= 1e-5,
        "{before} → {after} replicas: weights differ by {diff}"
    );
}

#[test]
fn two_replicas_resume_on_one() {
    resume_on_another_world(2, 1);
}

#[test]
fn one_replica_resumes_on_two() {
    resume_on_another_world(1, 2);
}
