//! No hang, ever: a worker that panics outside its job's own guard still answers, so the epoch
//! ends with an error naming the block instead of waiting forever.
//!
//! Each epoch runs on its own thread and the test waits for it with a generous bound: a hang
//! fails the test instead of stalling the suite.

use std::sync::mpsc;
use std::time::Duration;

use kiln_ml_core::{Block, BlockIndex, BlockLayout, BlockSource, Fingerprint, Layout, PlanRequest};
use kiln_ml_data::{LoaderConfig, NoCollate};
use kiln_ml_testkit::InOrderSampler;

/// How long an epoch of a few rows may take before it counts as hung.
const HANG: Duration = Duration::from_secs(60);

/// Reads (or fails) in a way that makes the worker panic outside the read's guard.
#[derive(Debug)]
enum Trap {
    /// The read fails, and describing the block for the error message panics.
    PanickingDescription,
    /// The read returns one item too few, of a type whose `Drop` panics.
    PanickingDrop,
}

/// An item whose `Drop` panics, as a buggy user type might.
#[derive(Debug, Clone)]
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("Bomb dropped");
        }
    }
}

struct TrapSource {
    layout: Layout,
    trap: Trap,
}

impl TrapSource {
    fn new(trap: Trap) -> Self {
        let mut builder = Layout::builder();
        builder.add_file(Fingerprint::of_bytes(b"trap.parquet"), &[4, 4]);
        Self {
            layout: builder.build().unwrap(),
            trap,
        }
    }
}

impl BlockLayout for TrapSource {
    fn blocks(&self) -> &[Block] {
        self.layout.blocks()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.layout.fingerprint()
    }
    fn describe_block(&self, _block: BlockIndex) -> String {
        match self.trap {
            Trap::PanickingDescription => panic!("describe_block panics"),
            Trap::PanickingDrop => "trap block".to_owned(),
        }
    }
}

impl BlockSource for TrapSource {
    type Item = Bomb;
    type Error = std::io::Error;

    fn read_block(&self, block: BlockIndex) -> Result<Vec<Bomb>, std::io::Error> {
        match self.trap {
            Trap::PanickingDescription => {
                Err(std::io::Error::other(format!("block {block} is bad")))
            }
            // Three items for a block of four: the worker drops them on the error path.
            Trap::PanickingDrop => Ok(vec![Bomb, Bomb, Bomb]),
        }
    }
}

/// Runs one epoch over a trap on a thread and checks that it ends, with an error naming the
/// first block, its file and the panic; a hang fails after [`HANG`].
fn assert_epoch_fails_naming_the_panic(trap: Trap, panic: &str) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let loader = LoaderConfig::new()
            .with_workers(2)
            .init(TrapSource::new(trap), NoCollate)
            .unwrap();
        let epoch = loader
            .plan_epoch(&InOrderSampler::new(2), &PlanRequest::new(0, 0))
            .unwrap();
        let mut error = None;
        for batch in epoch {
            match batch {
                Ok(batch) => std::mem::forget(batch),
                Err(failed) => error = Some(failed.to_string()),
            }
        }
        let _ = done.send(error);
    });
    let error = finished
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("the epoch hung for {HANG:?}"))
        .expect("the epoch must end with an error");
    assert!(
        error.contains("reading block 0 (file 0)") && error.contains(panic),
        "{error}"
    );
}

#[test]
fn a_panicking_describe_block_on_the_error_path_ends_the_epoch_with_an_error() {
    assert_epoch_fails_naming_the_panic(Trap::PanickingDescription, "describe_block panics");
}

#[test]
fn an_item_whose_drop_panics_ends_the_epoch_with_an_error() {
    assert_epoch_fails_naming_the_panic(Trap::PanickingDrop, "Bomb dropped");
}
