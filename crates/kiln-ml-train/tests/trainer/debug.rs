//! The `debug` preset: a NaN loss stops training with an error naming the step.

use burn::tensor::backend::AutodiffBackend;
use kiln_ml_train::{Error, Preset, Trainer};

use crate::common::{self, Batch};

fn nan_loss_in_debug_preset_names_the_step<B: AutodiffBackend>(device: B::Device) {
    let config = Preset::Debug.config().with_accumulation_steps(2);
    let mut trainer = common::sgd_trainer::<B>(&device, 0.01, config);
    let mut batches = common::batches::<B>(4, 4, 6, &device);
    // The 4th micro-batch of epoch 0 is micro-batch 1 of optimizer step 2.
    batches[3] = Batch {
        inputs: batches[3].inputs.clone(),
        targets: batches[3].targets.clone().mul_scalar(f32::NAN),
    };
    let error = trainer
        .fit(|p| common::plain(batches.clone(), p))
        .unwrap_err();
    match &error {
        Error::NonFiniteLoss {
            step,
            epoch,
            micro_batch,
            value,
        } => {
            assert_eq!((*step, *epoch, *micro_batch), (2, 0, 1));
            assert!(value.is_nan());
        }
        other => panic!("expected NonFiniteLoss, got {other}"),
    }
    let message = error.to_string();
    assert!(message.contains("optimizer step 2"), "{message}");
    assert_eq!(
        trainer.counters().applied_steps,
        1,
        "only the clean step ran"
    );
}

/// The debug preset overfits the first batches of epoch 0: the loss must fall far.
fn debug_preset_overfits_a_few_batches<B: AutodiffBackend>(device: B::Device) {
    let config = Preset::Debug.config().with_num_epochs(40);
    let mut trainer = Trainer::new(
        common::model::<B>(&device, 1),
        burn::optim::AdamConfig::new().init(),
        0.02,
        config,
        device.clone(),
    )
    .unwrap();
    let recorder = common::recorder();
    trainer.add_observer(recorder.clone());
    let batches = common::batches::<B>(10, 4, 6, &device);
    let requested = std::cell::RefCell::new(Vec::new());
    trainer
        .fit(|position| {
            requested.borrow_mut().push(position);
            common::plain(batches.clone(), position)
        })
        .unwrap();
    assert!(
        requested
            .borrow()
            .iter()
            .all(|p| p.epoch == 0 && p.consumed == 0),
        "overfitting always replays epoch 0"
    );
    let reports = common::step_reports(&recorder);
    assert_eq!(reports.len(), 40 * 4, "4 batches per epoch");
    let first = reports[0].loss.unwrap();
    let last = reports.last().unwrap().loss.unwrap();
    assert!(last < first * 0.1, "loss {first} -> {last}");
}

crate::backend_tests!(
    nan_loss_in_debug_preset_names_the_step,
    debug_preset_overfits_a_few_batches,
);
