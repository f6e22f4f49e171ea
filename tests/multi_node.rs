//! Multi-node data parallelism, for real: two processes on 127.0.0.1, one replica each, meet
//! through burn-collective's global coordinator (hosted by the test process). The tests start
//! both processes, bound them in time and stop them.
//!
//! burn-collective 0.21's global level completes one operation per registration and hangs in
//! the next, so kiln runs one session per operation across nodes (kiln-ml-train's `collective.rs`);
//! 20 optimizer steps here are some 20 sessions.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use burn::optim::SgdConfig;
use kiln_ml::backend::CpuAutodiff;
use kiln_ml::core::PlainBatches;
use kiln_ml::train::{DataParallel, TrainerConfig};
use kiln_ml_testkit::{MlpConfig, RegressionBatch, TEACHER_INPUTS, teacher_rows};

type B = CpuAutodiff;

const NODES: usize = 2;
const ROWS_PER_NODE: usize = 4;
const STEPS: usize = 20;
/// Both processes must be done by then (they take about a second here).
const DEADLINE: Duration = Duration::from_secs(180);
/// Where a node process writes its weights; set only in the processes this test starts.
const OUT_VARIABLE: &str = "KILN_TEST_NODE_OUT";
/// Optimizer steps a node process trains (0: it only joins).
const STEPS_VARIABLE: &str = "KILN_TEST_NODE_STEPS";

/// Rows `[offset, offset + rows)` of every global batch of `ROWS_PER_NODE × NODES` rows.
fn batches(offset: usize, rows: usize) -> Vec<RegressionBatch<B>> {
    let global = ROWS_PER_NODE * NODES;
    let (inputs, targets) = teacher_rows(STEPS * global, 17);
    (0..STEPS)
        .map(|step| {
            let start = step * global + offset;
            RegressionBatch::from_rows(
                &inputs[start * TEACHER_INPUTS..(start + rows) * TEACHER_INPUTS],
                &targets[start..start + rows],
                &Default::default(),
            )
        })
        .collect()
}

/// Trains on `batches` with SGD from the seeded model, joined to `replica` if given.
fn train(
    batches: Vec<RegressionBatch<B>>,
    replica: Option<&kiln_ml::train::Replica<burn::tensor::Device<B>>>,
    seed: u64,
) -> kiln_ml::train::Result<Vec<f32>> {
    let model = MlpConfig::new(TEACHER_INPUTS, &[8], 1)
        .with_seed(seed)
        .init(&Default::default());
    let mut trainer = TrainerConfig::new().with_num_epochs(1).init(
        model,
        SgdConfig::new().init(),
        0.1,
        Default::default(),
    )?;
    if let Some(replica) = replica {
        trainer.join(replica)?;
    }
    let steps = batches.len() as u64;
    if steps == 0 {
        // Joining only: even an empty epoch ends with a collective (the flush of its window).
        return Ok(trainer.model().params());
    }
    let summary = trainer
        .fit(|position| PlainBatches::new(batches.clone(), position, RegressionBatch::len))?;
    assert_eq!(summary.counters.optimizer_steps, steps);
    Ok(trainer.model().params())
}

/// The body of one node process (run by the test below, with its variables set): one replica
/// on this node, its shard of every global batch, its weights written to a file.
#[test]
#[ignore = "a node process of the tests below"]
fn node_process() {
    let out = std::env::var(OUT_VARIABLE).expect("started by the multi-node test");
    let steps: usize = std::env::var(STEPS_VARIABLE).unwrap().parse().unwrap();
    let parallel = DataParallel::from_env().unwrap();
    assert!(parallel.node().is_some(), "the node variables are set");
    let params = parallel
        .run::<B, _, _>(vec![Default::default()], |replica| {
            let offset = replica.rank() as usize * ROWS_PER_NODE;
            // Node 1 starts from other weights: joining gives it node 0's.
            let mut batches = batches(offset, ROWS_PER_NODE);
            batches.truncate(steps);
            train(batches, Some(&replica), 1 + u64::from(replica.rank()))
        })
        .unwrap();
    std::fs::write(out, serde_json::to_vec(&params[0]).unwrap()).unwrap();
}

/// `count` pairs of ports (`port`, `port + 1`: kiln's multi-node sessions use both), free right
/// now, none shared, all below the machine's ephemeral range. kiln closes and reopens a node's
/// ports at every operation, so an outgoing connection may take one in between, and `run`
/// refuses ports from that range; drawn from it (as this test once did), 4 runs in about 1,020
/// failed so here.
fn free_port_pairs(count: usize) -> Vec<u16> {
    let ephemeral_start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let low = ephemeral_start / 2;
    let pairs = u64::from((ephemeral_start - low) / 2);
    // Another start in each process: tests running at once rarely try the same ports.
    let clock = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let seed = u64::from(std::process::id()) ^ u64::from(clock.subsec_nanos());
    // The listeners stay open until every pair is chosen, so that no pair is chosen twice.
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for offset in 0..pairs {
        if ports.len() == count {
            break;
        }
        let port = low + 2 * ((seed + offset) % pairs) as u16;
        // Burn's servers listen on every interface.
        if let (Ok(first), Ok(second)) = (
            TcpListener::bind(("0.0.0.0", port)),
            TcpListener::bind(("0.0.0.0", port + 1)),
        ) {
            held.extend([first, second]);
            ports.push(port);
        }
    }
    assert_eq!(
        ports.len(),
        count,
        "no {count} free port pairs below {ephemeral_start}"
    );
    ports
}

fn start_node(rank: usize, coordinator: u16, port: u16, steps: usize, out: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "node_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OUT_VARIABLE, out)
        // One worker for burn-collective's runtime: no lost wake-ups in its sync (docs/training.md).
        .env("TOKIO_WORKER_THREADS", "1")
        .env(STEPS_VARIABLE, steps.to_string())
        .env("KILN_NUM_NODES", NODES.to_string())
        .env("KILN_NODE_RANK", rank.to_string())
        .env("KILN_COORDINATOR", format!("127.0.0.1:{coordinator}"))
        .env("KILN_NODE_ADDRESS", format!("127.0.0.1:{port}"))
        // The test process hosts the coordinator, apart from both nodes.
        .env("KILN_START_COORDINATOR", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every child until all succeeded, one failed, or the deadline passed; then kills
/// those still running (a node whose peer failed waits forever) and returns, when any did not
/// succeed, a message with every child's status and output.
fn wait_all(mut children: Vec<Child>) -> Result<(), String> {
    let started = Instant::now();
    // Read while the children run: a child blocked on a full pipe would never finish.
    let outputs: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let stdout = child.stdout.take().unwrap();
            let stderr = child.stderr.take().unwrap();
            (read_all(stdout), read_all(stderr))
        })
        .collect();
    let mut statuses = vec![None; children.len()];
    let deadline = std::env::var("KILN_TEST_NODE_DEADLINE_S")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .map_or(DEADLINE, Duration::from_secs);
    let failed = |statuses: &[Option<ExitStatus>]| {
        statuses
            .iter()
            .any(|status| status.is_some_and(|status| !status.success()))
    };
    while statuses.iter().any(Option::is_none) && !failed(&statuses) && started.elapsed() < deadline
    {
        for (child, status) in children.iter_mut().zip(&mut statuses) {
            if status.is_none() {
                *status = child.try_wait().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let timed_out = !failed(&statuses) && statuses.iter().any(Option::is_none);
    let mut report = String::new();
    for (rank, ((child, status), (stdout, stderr))) in
        children.iter_mut().zip(&statuses).zip(outputs).enumerate()
    {
        if status.is_none() {
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
        report.push_str(&format!("--- node {rank} ({status}):\n{stdout}{stderr}\n"));
    }
    if timed_out {
        return Err(format!(
            "the nodes did not finish within {deadline:?}\n{report}"
        ));
    }
    if failed(&statuses) {
        return Err(report);
    }
    Ok(())
}

/// A thread that reads `pipe` to its end.
fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The coordinator this test process hosts for every run, started on first use.
fn coordinator() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let port = free_port_pairs(1)[0];
        // It returns once both ports listen: no node is given them below.
        DataParallel::start_coordinator(port).unwrap();
        port
    })
}

/// Runs both node processes for `steps` optimizer steps; returns each node's weights. Runs take
/// turns: they share the coordinator.
fn run_nodes(steps: usize) -> Vec<Vec<f32>> {
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let directory = tempfile::tempdir().unwrap();
    let coordinator = coordinator();
    let outs: Vec<_> = (0..NODES)
        .map(|rank| directory.path().join(format!("node-{rank}.json")))
        .collect();
    let ports = free_port_pairs(NODES);
    let children = (0..NODES)
        .map(|rank| start_node(rank, coordinator, ports[rank], steps, &outs[rank]))
        .collect();
    if let Err(report) = wait_all(children) {
        panic!("{report}");
    }
    outs.iter()
        .map(|out| serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap())
        .collect()
}

#[test]
fn two_processes_on_loopback_start_from_node_0s_weights() {
    let nodes = run_nodes(0);
    let node_0 = MlpConfig::new(TEACHER_INPUTS, &[8], 1)
        .with_seed(1)
        .init::<B>(&Default::default())
        .params();
    assert_eq!(nodes[0], node_0, "node 0 keeps its weights");
    assert_eq!(
        nodes[1], node_0,
        "node 1, built from another seed, took node 0's"
    );
}

#[test]
fn two_processes_on_loopback_train_as_one_device() {
    let nodes = run_nodes(STEPS);
    assert_eq!(nodes[0], nodes[1], "both nodes apply the same updates");
    let single = train(batches(0, ROWS_PER_NODE * NODES), None, 1).unwrap();
    let diff = single
        .iter()
        .zip(&nodes[0])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff <= 1e-5,
        "two nodes differ from one device at twice the batch by {diff}"
    );
}
