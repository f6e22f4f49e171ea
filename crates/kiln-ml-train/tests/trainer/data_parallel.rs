//! Data parallelism on burn-collective: N replicas at batch b follow one device at batch N·b,
//! an overflow on any replica skips the step on all, and a failing replica stops the run.

use burn::module::{Module, ModuleMapper, Param};
use burn::optim::SgdConfig;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use kiln_ml_train::{
    BestCheckpoints, DataParallel, EarlyStopping, Error, GradientClipping, LossScalerConfig, Mode,
    Precision, Replica, TrainerConfig,
};

use crate::backend_tests;
use crate::common::*;

const ROWS_PER_REPLICA: usize = 4;
const REPLICAS: usize = 2;
const ACCUMULATION: u32 = 2;
const STEPS: usize = 20;

backend_tests!(
    two_replicas_follow_one_device_at_twice_the_batch,
    an_overflow_on_one_replica_skips_the_step_on_all,
    a_non_finite_loss_under_anomaly_detection_stops_every_replica,
    a_failing_replica_stops_the_others,
    a_replica_with_an_empty_last_window_steps_with_the_others,
    a_replica_that_stops_early_fails_the_run,
    joining_copies_the_roots_weights_bit_for_bit,
    early_stopping_on_rank_0s_validation_stops_every_replica,
    replicas_draw_their_own_host_randomness,
    replicas_that_built_different_trainers_are_refused_at_join,
    replicas_that_loaded_different_checkpoints_are_refused_when_fit_starts,
);

fn config(precision: Precision) -> TrainerConfig {
    TrainerConfig::new()
        .with_num_epochs(1)
        .with_precision(precision)
        .with_accumulation_steps(ACCUMULATION)
        .with_clipping(Some(GradientClipping::Norm { max_norm: 0.5 }))
        // A scale no step overflows at, on one device or two: the runs compared skip nothing.
        .with_loss_scaler(LossScalerConfig {
            init_scale: 1024.0,
            ..LossScalerConfig::default()
        })
}

/// A trainer of `model(device, seed)` with SGD at 0.1, joined to `replica` (a failure panics,
/// which the launcher reports as the replica's failure).
fn joined_trainer<B: AutodiffBackend>(
    replica: &Replica<B::Device>,
    config: TrainerConfig,
    seed: u64,
) -> kiln_ml_train::Trainer<B, Mlp<B>, impl burn::optim::Optimizer<Mlp<B>, B> + use<B>, f64> {
    config
        .init(
            model::<B>(replica.device(), seed),
            SgdConfig::new().init(),
            0.1,
            replica.device().clone(),
        )
        .and_then(|trainer| trainer.joined(replica))
        .expect("a trainer joins its replica")
}

/// Rows `[offset, offset + rows)` of every global batch of `ROWS_PER_REPLICA × REPLICAS` rows.
fn shard_batches<B: AutodiffBackend>(
    offset: usize,
    rows: usize,
    device: &B::Device,
) -> Vec<Batch<B>> {
    let global = ROWS_PER_REPLICA * REPLICAS;
    let batches = STEPS * ACCUMULATION as usize;
    let (inputs, targets) = self::rows(batches * global, 11);
    (0..batches)
        .map(|index| {
            let start = index * global + offset;
            batch(
                &inputs[start * INPUTS..(start + rows) * INPUTS],
                &targets[start..start + rows],
                device,
            )
        })
        .collect()
}

/// Trains on one device at the global batch, then on two replicas at half of it.
fn single_and_parallel<B: AutodiffBackend>(
    device: B::Device,
    precision: Precision,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let single = fitted_params(
        sgd_trainer::<B>(&device, 0.1, config(precision)),
        shard_batches::<B>(0, ROWS_PER_REPLICA * REPLICAS, &device),
        STEPS as u64,
    );
    let replicas = DataParallel::local()
        .run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
            // Rank 1 starts from other weights: joining gives it rank 0's.
            let mut trainer = joined_trainer::<B>(
                &replica,
                config(precision),
                1 + 98 * u64::from(replica.rank()),
            );
            let offset = replica.rank() as usize * ROWS_PER_REPLICA;
            let batches = shard_batches::<B>(offset, ROWS_PER_REPLICA, replica.device());
            let summary = trainer.fit(|position| plain(batches.clone(), position))?;
            assert_eq!(summary.counters.optimizer_steps, STEPS as u64);
            assert_eq!(summary.counters.skipped_steps, 0);
            assert_eq!(trainer.data_parallel_rank(), Some((replica.rank(), 2)));
            Ok(params(trainer.model()))
        })
        .unwrap();
    (single, replicas)
}

fn two_replicas_follow_one_device_at_twice_the_batch<B: AutodiffBackend>(device: B::Device) {
    let initial = params(&model::<B>(&device, 1));
    let (single, replicas) = single_and_parallel::<B>(device.clone(), Precision::F32);
    let spread = max_abs_diff(&replicas[0], &replicas[1]);
    assert!(
        spread <= replica_spread::<B>(&device),
        "every replica applies the same update: they differ by {spread}"
    );
    assert!(
        max_abs_diff(&single, &initial) > 1e-2,
        "training moved the weights"
    );
    let diff = max_abs_diff(&single, &replicas[0]);
    let tolerance = f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "f32: replicas differ from one device by {diff} > {tolerance}"
    );

    for precision in mixed_precisions::<B>(&device) {
        let (single, replicas) = single_and_parallel::<B>(device.clone(), precision);
        let spread = max_abs_diff(&replicas[0], &replicas[1]);
        assert!(
            spread <= replica_spread::<B>(&device),
            "{precision}: replicas differ by {spread}"
        );
        let diff = max_abs_diff(&single, &replicas[0]);
        // The low-precision forward rounds each half-batch's activations on its own: the
        // stated tolerances (docs/training.md) are about each type's machine epsilon, 1e-3 in
        // f16 (2e-5 measured on flex) and 1e-2 in bf16 (2e-3 measured).
        let tolerance = match precision {
            Precision::Bf16Mixed => 1e-2,
            _ => 1e-3,
        };
        assert!(
            diff <= tolerance,
            "{precision}: replicas differ from one device by {diff}"
        );
    }
}

/// Four steps on two replicas under f16-mixed, rank 1's second batch overflowing the loss: each
/// replica's counters and parameters.
fn overflow_on_rank_1<B: AutodiffBackend>(
    device: B::Device,
    config: TrainerConfig,
) -> Result<Vec<(kiln_ml_train::Counters, Vec<f32>)>, Error> {
    DataParallel::local().run::<B, _, _>(vec![device; REPLICAS], |replica| {
        let mut trainer = joined_trainer::<B>(&replica, config.clone(), 1);
        let (inputs, mut targets) = rows(4 * ROWS_PER_REPLICA, 3 + u64::from(replica.rank()));
        if replica.rank() == 1 {
            // Overflows f16 in the loss of the second step on rank 1 only.
            targets[ROWS_PER_REPLICA] = 1e30;
        }
        let batches: Vec<Batch<B>> = (0..4)
            .map(|index| {
                let rows = index * ROWS_PER_REPLICA..(index + 1) * ROWS_PER_REPLICA;
                batch(
                    &inputs[rows.start * INPUTS..rows.end * INPUTS],
                    &targets[rows],
                    replica.device(),
                )
            })
            .collect();
        let summary = trainer.fit(|position| plain(batches.clone(), position))?;
        Ok((summary.counters, params(trainer.model())))
    })
}

fn an_overflow_on_one_replica_skips_the_step_on_all<B: AutodiffBackend>(device: B::Device) {
    if Precision::F16Mixed.check_supported::<B>(&device).is_err() {
        return;
    }
    let config = config(Precision::F16Mixed).with_accumulation_steps(1);
    let outcomes = overflow_on_rank_1::<B>(device, config).unwrap();
    for (counters, _) in &outcomes {
        assert_eq!(counters.optimizer_steps, 4);
        assert_eq!(counters.skipped_steps, 1, "{counters:?}");
    }
    assert_eq!(outcomes[0].1, outcomes[1].1);
}

/// With `detect_anomalies` a non-finite loss stops training under f16-mixed too (as on one
/// device): every replica fails at that step, none skips it.
fn a_non_finite_loss_under_anomaly_detection_stops_every_replica<B: AutodiffBackend>(
    device: B::Device,
) {
    if Precision::F16Mixed.check_supported::<B>(&device).is_err() {
        return;
    }
    let config = config(Precision::F16Mixed)
        .with_accumulation_steps(1)
        .with_detect_anomalies(true);
    match overflow_on_rank_1::<B>(device, config) {
        Err(Error::ReplicaFailed { message, .. }) => {
            assert!(message.contains("non-finite"), "{message}");
            assert!(message.contains("optimizer step 2"), "{message}");
        }
        other => panic!("expected a non-finite loss to stop the run, got {other:?}"),
    }
}

fn a_failing_replica_stops_the_others<B: AutodiffBackend>(device: B::Device) {
    let result = DataParallel::local().run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
        let mut trainer = joined_trainer::<B>(&replica, config(Precision::F32), 1);
        if replica.rank() == 1 {
            return Err(Error::InvalidDataParallel {
                reason: "rank 1 gives up".to_owned(),
            });
        }
        // Rank 0 waits in the first all-reduce until the launcher releases it.
        let batches = shard_batches::<B>(0, ROWS_PER_REPLICA, replica.device());
        trainer.fit(|position| plain(batches.clone(), position))?;
        Ok(())
    });
    match result {
        Err(Error::ReplicaFailed { rank: 1, message }) => {
            assert!(message.contains("rank 1 gives up"), "{message}")
        }
        other => panic!("expected rank 1's failure, got {other:?}"),
    }
    // The collective is usable again afterwards.
    let ranks = DataParallel::local()
        .run::<B, _, _>(vec![device; REPLICAS], |replica| Ok(replica.rank()))
        .unwrap();
    assert_eq!(ranks, vec![0, 1]);
}

/// Rank 0 has one batch more than rank 1 at the epoch's end: the flushed step runs on both, rank
/// 1 sending zeros and no micro-batch, so it equals one device stepping on rank 0's last batch.
fn a_replica_with_an_empty_last_window_steps_with_the_others<B: AutodiffBackend>(
    device: B::Device,
) {
    let config = || config(Precision::F32).with_clipping(None);
    let global = shard_batches::<B>(0, ROWS_PER_REPLICA * REPLICAS, &device);
    let mut single = sgd_trainer::<B>(&device, 0.1, config());
    let mut batches = global[..2].to_vec();
    batches.extend(
        shard_batches::<B>(0, ROWS_PER_REPLICA, &device)
            .into_iter()
            .nth(2),
    );
    let summary = single
        .fit(|position| plain(batches.clone(), position))
        .unwrap();
    assert_eq!(summary.counters.optimizer_steps, 2);

    let replicas = DataParallel::local()
        .run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
            let mut trainer = joined_trainer::<B>(&replica, config(), 1);
            let offset = replica.rank() as usize * ROWS_PER_REPLICA;
            let mut batches = shard_batches::<B>(offset, ROWS_PER_REPLICA, replica.device());
            batches.truncate(3 - replica.rank() as usize);
            let summary = trainer.fit(|position| plain(batches.clone(), position))?;
            assert_eq!(summary.counters.optimizer_steps, 2);
            Ok(params(trainer.model()))
        })
        .unwrap();
    let spread = max_abs_diff(&replicas[0], &replicas[1]);
    assert!(
        spread <= replica_spread::<B>(&device),
        "replicas differ by {spread}"
    );
    let diff = max_abs_diff(&params(single.model()), &replicas[0]);
    let tolerance = f32_tolerance::<B>(&device);
    assert!(
        diff <= tolerance,
        "the flushed step differs from one device by {diff} > {tolerance}"
    );
}

/// A replica that returns while another still trains does not leave it training alone: the
/// closing call of the one meets a gradient all-reduce of the other, and both fail.
fn a_replica_that_stops_early_fails_the_run<B: AutodiffBackend>(device: B::Device) {
    let result = DataParallel::local().run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
        let mut trainer = joined_trainer::<B>(&replica, config(Precision::F32), 1);
        if replica.rank() == 0 {
            let batches = shard_batches::<B>(0, ROWS_PER_REPLICA, replica.device());
            trainer.fit(|position| plain(batches.clone(), position))?;
        }
        Ok(())
    });
    let error = result.unwrap_err().to_string();
    assert!(error.contains("Mismatch"), "{error}");

    // Joining comes before training.
    let mut trained = sgd_trainer::<B>(&device, 0.1, config(Precision::F32));
    let batches = shard_batches::<B>(0, ROWS_PER_REPLICA, &device);
    trained.train_batch(batches[0].clone()).unwrap();
    let refused = DataParallel::local().run::<B, _, _>(vec![device], |replica| {
        // One replica: the trainer built outside is on the same device.
        let mut trained = sgd_trainer::<B>(replica.device(), 0.1, config(Precision::F32));
        trained.train_batch(batches[0].clone())?;
        trained.join(&replica)
    });
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("join before training"), "{error}");
}

/// Every weight times −0: a positive one becomes −0, a negative one +0.
struct TimesNegativeZero;

impl<B: Backend> ModuleMapper<B> for TimesNegativeZero {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|tensor| tensor.mul_scalar(-0.0))
    }
}

/// Joining gives every replica the root's weights bit for bit, negative zeros included (a sum
/// with +0 from the other replicas would make them +0 there and leave them −0 on the root).
fn joining_copies_the_roots_weights_bit_for_bit<B: AutodiffBackend>(device: B::Device) {
    let bits = DataParallel::local()
        .run::<B, _, _>(vec![device; REPLICAS], |replica| {
            let mut model = model::<B>(replica.device(), 1 + u64::from(replica.rank()));
            if replica.rank() == 0 {
                model = model.map(&mut TimesNegativeZero);
            }
            let trainer = config(Precision::F32)
                .init(
                    model,
                    SgdConfig::new().init(),
                    0.1,
                    replica.device().clone(),
                )?
                .joined(&replica)?;
            Ok(params(trainer.model())
                .iter()
                .map(|weight| weight.to_bits())
                .collect::<Vec<u32>>())
        })
        .unwrap();
    assert!(
        bits[0].contains(&(-0.0f32).to_bits()),
        "the root has −0 weights"
    );
    assert_eq!(bits[0], bits[1]);
}

/// Validation on rank 0 only, as docs/training.md advises: early stopping there stops every
/// replica after the same epoch (the decision is all-reduced), and the replicas without the
/// metric neither fail nor stop alone; `BestCheckpoints` on every rank writes on rank 0 only.
fn early_stopping_on_rank_0s_validation_stops_every_replica<B: AutodiffBackend>(device: B::Device) {
    const SCORES: [f64; 5] = [1.0, 0.5, 0.6, 0.7, 0.8];
    let dir = tempfile::tempdir().unwrap();
    let best_dir = dir.path().to_path_buf();
    let stopped = DataParallel::local()
        .run::<B, _, _>(vec![device; REPLICAS], |replica| {
            let mut trainer = joined_trainer::<B>(
                &replica,
                config(Precision::F32).with_num_epochs(SCORES.len() as u64),
                1,
            );
            trainer.add_callback(EarlyStopping::new("valid/score", Mode::Min).with_patience(1));
            trainer.add_callback(BestCheckpoints::new(&best_dir, "valid/score", Mode::Min, 1));
            let offset = replica.rank() as usize * ROWS_PER_REPLICA;
            let batches = shard_batches::<B>(offset, ROWS_PER_REPLICA, replica.device());
            let batches = batches[..2 * ACCUMULATION as usize].to_vec();
            let is_main = replica.is_main();
            let summary = trainer.fit_with(
                |position| plain(batches.clone(), position),
                |trainer, epoch| {
                    if is_main {
                        trainer.log_metric("valid/score", SCORES[epoch.epoch as usize]);
                    }
                    Ok(())
                },
            )?;
            Ok(summary.stopped_early)
        })
        .unwrap();
    // Epoch 2 (0.6) is the first without improvement on 0.5: patience 1 stops there.
    assert_eq!(stopped, vec![Some(2), Some(2)]);
    let best = BestCheckpoints::new(dir.path(), "valid/score", Mode::Min, 1);
    assert_eq!(best.best().unwrap().unwrap().value, 0.5);
}

/// Each replica draws its own host randomness (augmentation): rank 0 what a single trainer
/// draws, rank 1 another stream.
fn replicas_draw_their_own_host_randomness<B: AutodiffBackend>(device: B::Device) {
    use rand::RngCore;
    let single = sgd_trainer::<B>(&device, 0.1, config(Precision::F32))
        .rng()
        .next_u64();
    let draws = DataParallel::local()
        .run::<B, _, _>(vec![device; REPLICAS], |replica| {
            let mut trainer = joined_trainer::<B>(&replica, config(Precision::F32), 1);
            Ok(trainer.rng().next_u64())
        })
        .unwrap();
    assert_eq!(draws[0], single);
    assert_ne!(draws[0], draws[1]);
}

/// A replica built with another accumulation than the others would apply other updates, and
/// one that stops on anomalies where the others skip the step would leave them waiting: the
/// join refuses either on every replica, saying what must agree.
fn replicas_that_built_different_trainers_are_refused_at_join<B: AutodiffBackend>(
    device: B::Device,
) {
    let differences: [fn(TrainerConfig, u32) -> TrainerConfig; 2] = [
        |config, rank| config.with_accumulation_steps(ACCUMULATION + rank),
        |config, rank| config.with_detect_anomalies(rank == 0),
    ];
    for differ in differences {
        let result =
            DataParallel::local().run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
                differ(config(Precision::F32), replica.rank())
                    .init(
                        model::<B>(replica.device(), 1),
                        SgdConfig::new().init(),
                        0.1,
                        replica.device().clone(),
                    )?
                    .joined(&replica)
                    .map(drop)
            });
        match result {
            Err(Error::ReplicaFailed { message, .. }) => {
                assert!(message.contains("built different trainers"), "{message}")
            }
            other => panic!("expected the join to refuse, got {other:?}"),
        }
    }
}

/// Replicas that resumed from different checkpoints, or some from none, would train different
/// weights on summed gradients: `fit` refuses to start on every replica, saying what it loaded.
fn replicas_that_loaded_different_checkpoints_are_refused_when_fit_starts<B: AutodiffBackend>(
    device: B::Device,
) {
    let dir = tempfile::tempdir().unwrap();
    let batches = shard_batches::<B>(0, ROWS_PER_REPLICA, &device);
    let mut single = sgd_trainer::<B>(&device, 0.1, config(Precision::F32));
    let mut paths = Vec::new();
    for step in 1..=2 {
        for batch in &batches[..ACCUMULATION as usize] {
            single.train_batch(batch.clone()).unwrap();
        }
        let path = dir.path().join(format!("step-{step}.kiln"));
        single.save_checkpoint(&path).unwrap();
        paths.push(path);
    }
    let run = |loads: [Option<&std::path::PathBuf>; REPLICAS]| {
        DataParallel::local().run::<B, _, _>(vec![device.clone(); REPLICAS], |replica| {
            let mut trainer = joined_trainer::<B>(&replica, config(Precision::F32), 1);
            if let Some(path) = loads[replica.rank() as usize] {
                trainer.load_checkpoint(path)?;
            }
            let offset = replica.rank() as usize * ROWS_PER_REPLICA;
            let batches = shard_batches::<B>(offset, ROWS_PER_REPLICA, replica.device());
            trainer.fit(|position| plain(batches.clone(), position))?;
            Ok(())
        })
    };
    for loads in [
        [Some(&paths[0]), Some(&paths[1])],
        [Some(&paths[1]), None],
        [None, Some(&paths[0])],
    ] {
        match run(loads) {
            Err(Error::ReplicaFailed { message, .. }) => assert!(
                message.contains("start `fit` from different states"),
                "{loads:?}: {message}"
            ),
            other => panic!("{loads:?}: expected fit to refuse, got {other:?}"),
        }
    }
    run([Some(&paths[1]), Some(&paths[1])]).expect("the same checkpoint on every replica");
}
