//! The data-parallel launcher: one thread per device, each training a replica, all on one
//! fusion stream; the replicas of a node meet in their group, and on many nodes through
//! burn-collective's global level.

use std::net::TcpStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use burn::collective::{CollectiveConfig, PeerId, reset_collective};
use burn::tensor::StreamId;
use burn::tensor::backend::AutodiffBackend;
use kiln_ml_core::panic_message;

use crate::collective::Collective;
use crate::ephemeral_ports::EphemeralPorts;
use crate::replica_group::{RELEASED, ReplicaGroup, StallWatch};
use crate::{Error, NodeConfig, Replica, Result};

/// Runs data-parallel training: one replica per device on this node, and, with a
/// [`NodeConfig`], one process per node (burn-collective's local and global levels).
///
/// [`run`](Self::run) calls the closure once per device, each on its own thread, with that
/// replica's [`Replica`]; the closure builds a trainer, [`join`](crate::Trainer::join)s it and
/// trains on the replica's [`shard`](Replica::shard) of the data. Gradients are summed over all
/// replicas at every optimizer step and normalized by the micro-batches (or items) of all of
/// them, so N replicas at batch b follow the same trajectory as one device at batch N·b.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use kiln_ml_train::DataParallel;
///
/// type B = Autodiff<Flex>;
/// let ranks = DataParallel::local()
///     .run::<B, _, _>(vec![Default::default(); 2], |replica| Ok(replica.rank()))
///     .unwrap();
/// assert_eq!(ranks, vec![0, 1]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataParallel {
    node: Option<NodeConfig>,
    stall_warning: Option<Duration>,
}

impl Default for DataParallel {
    fn default() -> Self {
        Self::local()
    }
}

/// One multi-node run per process at a time: burn-collective keeps one server per backend per
/// process, which two concurrent runs would share.
static RUN_LOCK: Mutex<()> = Mutex::new(());

impl DataParallel {
    /// How long a replica waits in a collective call on one node before stderr says who is
    /// missing: PyTorch's default NCCL timeout, at which kiln reports instead of aborting.
    pub const DEFAULT_STALL_WARNING: Duration = Duration::from_secs(600);

    /// Every replica on this node's devices.
    pub fn local() -> Self {
        Self {
            node: None,
            stall_warning: Some(Self::DEFAULT_STALL_WARNING),
        }
    }

    /// This node's devices as part of a multi-node run.
    pub fn with_node(node: NodeConfig) -> Self {
        Self {
            node: Some(node),
            ..Self::local()
        }
    }

    /// How long a replica may wait in a collective call with the other replicas of this node
    /// before stderr says which local ranks are in it and which have not arrived (and, when it
    /// completes, after how long); `None` says nothing. Default [`Self::DEFAULT_STALL_WARNING`]
    /// (10 minutes). Nothing is aborted: a replica that is slow, not hung (kernels compiled in
    /// its first steps, a long validation), goes on. A run on one node only: across nodes every
    /// replica calls burn-collective directly, and those calls are not watched. `Some(ZERO)`
    /// reports every call.
    pub fn with_stall_warning(mut self, after: Option<Duration>) -> Self {
        self.stall_warning = after;
        self
    }

    /// One node, or many as the environment says ([`NodeConfig::from_env`]).
    pub fn from_env() -> Result<Self> {
        Ok(Self {
            node: NodeConfig::from_env()?,
            ..Self::local()
        })
    }

    /// The node settings, when this is a multi-node run.
    pub fn node(&self) -> Option<&NodeConfig> {
        self.node.as_ref()
    }

    /// Runs `train` once per device, each on its own thread, as replicas of one data-parallel
    /// run, and returns what each returned, in local-rank order.
    ///
    /// If a replica fails or panics, its failure is printed at once on stderr; on one node
    /// the others are released from any collective operation they wait in (they fail too) and
    /// the first failure is returned as [`Error::ReplicaFailed`] naming its rank. Across nodes,
    /// replicas waiting on another node's collective cannot always be released (burn-collective
    /// has no abort; see docs/training.md), so `run` may not return: stderr says why. Multi-node
    /// runs in one process take turns.
    ///
    /// Every replica thread works on the fusion stream of the thread that calls `run`
    /// (`StreamId`), so tensors made before the run, and the sums the replicas exchange, stay
    /// on one stream (see `replica_group.rs` for why).
    pub fn run<B, T, F>(&self, devices: Vec<B::Device>, train: F) -> Result<Vec<T>>
    where
        B: AutodiffBackend,
        T: Send,
        F: Fn(Replica<B::Device>) -> Result<T> + Sync,
    {
        if devices.is_empty() {
            return Err(Error::InvalidDataParallel {
                reason: "no devices to run replicas on".to_owned(),
            });
        }
        let _turn = self.node.as_ref().map(|_| {
            RUN_LOCK
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        });
        let sessions = self.sessions(devices.len())?;
        if let Some(node) = &self.node {
            check_one_tokio_worker(std::env::var("TOKIO_WORKER_THREADS").ok().as_deref())?;
            check_node_ports(node, EphemeralPorts::of_this_machine().as_ref())?;
            check_node_ports_free(node)?;
            if node.start_coordinator {
                Self::start_coordinator(node.coordinator_port()?)?;
            }
            // Forget whatever an earlier, failed run left registered.
            release_waiting::<B>();
        }
        let watch = self.stall_warning.map(StallWatch::on_stderr);
        let group = Arc::new(ReplicaGroup::new(devices.len(), watch));
        let stream = StreamId::current();

        let per_node = devices.len() as u32;
        let (node_rank, nodes) = self
            .node
            .as_ref()
            .map_or((0, 1), |node| (node.node_rank, node.num_nodes));
        let (sender, receiver) = mpsc::channel::<(u32, std::result::Result<T, String>)>();
        let train = &train;
        std::thread::scope(|scope| {
            for (local_rank, device) in devices.into_iter().enumerate() {
                let rank = node_rank * per_node + local_rank as u32;
                let peer = PeerId(rank);
                let replica = Replica {
                    rank,
                    world: nodes * per_node,
                    local_rank: local_rank as u32,
                    node_rank,
                    device,
                    collective: match &sessions {
                        None => Collective::local(local_rank, group.clone()),
                        Some(configs) => Collective::per_operation(peer, configs.clone(), nodes),
                    },
                };
                let sender = sender.clone();
                std::thread::Builder::new()
                    .name(format!("kiln-replica-{}", replica.rank))
                    .spawn_scoped(scope, move || {
                        let rank = replica.rank;
                        let outcome = catch_unwind(AssertUnwindSafe(|| {
                            stream.executes(|| run_replica::<B, T, F>(replica, train))
                        }))
                        .unwrap_or_else(|panic| {
                            Err(format!("panicked: {}", panic_message(panic.as_ref())))
                        });
                        let _ = sender.send((rank, outcome));
                    })
                    .expect("the operating system starts a replica thread");
            }
            drop(sender);
            let mut results: Vec<(u32, T)> = Vec::new();
            let mut failures: Vec<(u32, String)> = Vec::new();
            for (rank, outcome) in receiver {
                match outcome {
                    Ok(value) => results.push((rank, value)),
                    Err(message) => {
                        if failures.is_empty() {
                            // Said at once, on stderr whatever logger is installed: across
                            // nodes the other replicas may never be released (see below), and
                            // `run` would then never return it.
                            eprintln!(
                                "error: kiln-ml-train: data-parallel rank {rank} failed: {message}"
                            );
                            group.abort(&format!("rank {rank} failed"));
                            if self.node.is_some() {
                                release_waiting::<B>();
                            }
                        }
                        failures.push((rank, message));
                    }
                }
            }
            if let Some((rank, message)) = root_failure(failures) {
                return Err(Error::ReplicaFailed { rank, message });
            }
            results.sort_by_key(|(rank, _)| *rank);
            Ok(results.into_iter().map(|(_, value)| value).collect())
        })
    }

    /// Across nodes, the two burn-collective configurations that sessions alternate between
    /// (see `collective.rs`) for `devices` replicas on this node; none on one node.
    fn sessions(&self, devices: usize) -> Result<Option<[CollectiveConfig; 2]>> {
        let Some(node) = &self.node else {
            return Ok(None);
        };
        let local = CollectiveConfig::default().with_num_devices(devices);
        node.validate()?;
        let (coordinator_host, coordinator_port) = node.coordinator_host_port()?;
        let (node_host, node_port) = node.node_host_port()?;
        let address = |host: &str, port: u16| {
            format!("ws://{host}:{port}")
                .parse()
                .expect("an address parses from any string")
        };
        let session = |parity: u16| -> Result<CollectiveConfig> {
            let config = local
                .clone()
                .with_num_nodes(node.num_nodes)
                .with_global_address(address(coordinator_host, coordinator_port + parity))
                .with_node_address(address(node_host, node_port + parity))
                .with_data_service_port(node_port + parity);
            if config.is_valid() {
                Ok(config)
            } else {
                Err(Error::InvalidDataParallel {
                    reason: format!("burn-collective refused the settings {config}"),
                })
            }
        };
        Ok(Some([session(0)?, session(1)?]))
    }
}

/// Across nodes, burn-collective 0.21's runtime must run on one worker thread: with more, its
/// end-of-operation sync can miss the other node's arrival (it checks, then starts waiting, and a
/// wake-up in between is lost) and wait forever, on this 2-core machine about once per 600
/// operations. The runtime is Burn's and reads `TOKIO_WORKER_THREADS`, which only the process's
/// environment can set safely.
fn check_one_tokio_worker(workers: Option<&str>) -> Result<()> {
    if workers.map(str::trim) == Some("1") {
        return Ok(());
    }
    Err(Error::InvalidDataParallel {
        reason: format!(
            "a multi-node run needs TOKIO_WORKER_THREADS=1 in each node's environment (it is {}): \
             with more workers burn-collective 0.21 can lose a wake-up and hang (docs/training.md, \
             \"Many nodes\")",
            workers.map_or("unset".to_owned(), |value| format!("{value:?}"))
        ),
    })
}

/// Refuses tensor-service ports that the machine's outgoing connections may take: kiln closes
/// and reopens them at every operation, and one taken in between cuts this node off
/// (`ephemeral_ports.rs`). Nothing is checked where the range cannot be read.
fn check_node_ports(node: &NodeConfig, ephemeral: Option<&EphemeralPorts>) -> Result<()> {
    let Some(ephemeral) = ephemeral else {
        return Ok(());
    };
    let ports = port_pair(node.node_port()?);
    let port = ports[0];
    let Some(taken) = ports.into_iter().find(|&port| ephemeral.may_take(port)) else {
        return Ok(());
    };
    let (low, high) = ephemeral.bounds();
    Err(Error::InvalidDataParallel {
        reason: format!(
            "the node address {:?} serves tensors on ports {port} and {}, and {taken} lies in this \
             machine's ephemeral port range {low}-{high} (/proc/sys/net/ipv4/ip_local_port_range): \
             kiln closes and reopens these ports at every operation, and an outgoing connection \
             may take one in between, after which the other nodes cannot reach this node. Choose \
             ports outside the range (the usual range starts at 32768; PyTorch's default is 29500), \
             or add them to net.ipv4.ip_local_reserved_ports (which lists every reserved port: \
             append {port}-{} to it, do not replace it)",
            node.node_address, ports[1], ports[1],
        ),
    })
}

/// Refuses tensor-service ports this node cannot listen on: burn-collective 0.21 only drops the
/// error, and every node would then fail at the first transfer from this one.
fn check_node_ports_free(node: &NodeConfig) -> Result<()> {
    let port = node.node_port()?;
    // Both listen on every interface of this machine, so the host names do not keep them apart.
    let coordinator = node.coordinator_port()?;
    if node.start_coordinator && port.abs_diff(coordinator) <= 1 {
        return Err(Error::InvalidDataParallel {
            reason: format!(
                "the node address {:?} and the coordinator {:?} this process starts share a \
                 port: each uses its port and the next one",
                node.node_address, node.coordinator
            ),
        });
    }
    check_can_listen(
        port_pair(port),
        &format!("this node (the node address {:?})", node.node_address),
    )
}

/// A server's two ports: kiln's multi-node sessions alternate between `port` and the next.
fn port_pair(port: u16) -> [u16; 2] {
    [port, port.saturating_add(1)]
}

/// Refuses `ports` when this machine cannot listen on one on every interface, as Burn's servers
/// do: Burn only logs such a failure, and the run would then wait or fail far from its cause.
fn check_can_listen(ports: [u16; 2], who: &str) -> Result<()> {
    for port in ports {
        std::net::TcpListener::bind(("0.0.0.0", port)).map_err(|error| {
            Error::InvalidDataParallel {
                reason: format!("{who} cannot listen on port {port}: {error}"),
            }
        })?;
    }
    Ok(())
}

/// Resets burn-collective's server for the backend, which fails every operation a replica waits
/// in. A server that already died (it panics on what it does not implement) needs no reset.
/// The failure to report: the first that is not only the echo of another's: a replica released
/// from its group, or a collective torn down under a replica (a failed peer, or the reset that
/// releases the others, can end burn-collective's local server before a replica's own answer
/// reaches it).
fn root_failure(failures: Vec<(u32, String)>) -> Option<(u32, String)> {
    let echo = |message: &str| message.contains("LocalServerMissing") || message.contains(RELEASED);
    let root = failures.iter().position(|(_, message)| !echo(message));
    let mut failures = failures;
    match root {
        Some(index) => Some(failures.swap_remove(index)),
        None => failures.into_iter().next(),
    }
}

fn release_waiting<B: AutodiffBackend>() {
    let _ = catch_unwind(reset_collective::<B::InnerBackend>);
}

/// One replica's thread: train, then, on one node, meet the others in the closing call.
fn run_replica<B, T, F>(replica: Replica<B::Device>, train: &F) -> std::result::Result<T, String>
where
    B: AutodiffBackend,
    F: Fn(Replica<B::Device>) -> Result<T>,
{
    let collective = replica.collective();
    let value = train(replica).map_err(|error| error.to_string())?;
    // Returning while another replica still trains would leave it waiting in a sum forever:
    // meet every replica in a call no training step makes first, so a replica still training
    // fails on the mismatch instead.
    collective.close().map_err(|error| {
        format!("the closing call (did another replica stop training early?): {error}")
    })?;
    Ok(value)
}

impl DataParallel {
    /// Starts burn-collective's global coordinator (its orchestrator) on `port` and `port + 1`
    /// (the sessions of a multi-node run alternate between the two), on a thread of this
    /// process, once: it serves every later run and stops with the process. Node 0 calls it for
    /// you when its [`NodeConfig::start_coordinator`] is set; a launcher that keeps the
    /// coordinator apart from the nodes calls it itself. It returns once both ports accept
    /// connections (an error if they do not within 10 s). Burn's server listens on every
    /// interface (`0.0.0.0`), so keep both ports behind the cluster's firewall.
    pub fn start_coordinator(port: u16) -> Result<()> {
        static STARTED: OnceLock<u16> = OnceLock::new();
        let ports = port_pair(port);
        if STARTED.get().is_none() {
            check_can_listen(ports, "the coordinator")?;
        }
        let started = *STARTED.get_or_init(|| {
            std::thread::Builder::new()
                .name("kiln-collective-coordinator".to_owned())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .enable_all()
                        .build()
                        .expect("a tokio runtime for the coordinator");
                    runtime.block_on(async {
                        tokio::join!(
                            burn_collective::start_global_orchestrator(ports[0]),
                            burn_collective::start_global_orchestrator(ports[1]),
                        )
                    });
                })
                .expect("the operating system starts the coordinator thread");
            port
        });
        if started != port {
            return Err(Error::InvalidDataParallel {
                reason: format!(
                    "this process already runs a coordinator on port {started}, not {port}"
                ),
            });
        }
        // Its thread binds the ports, and Burn only logs a bind that fails (a port taken since
        // the check above): return once both accept connections, so that nodes started next
        // find it there.
        let deadline = Instant::now() + COORDINATOR_START;
        for port in ports {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline {
                    return Err(Error::InvalidDataParallel {
                        reason: format!(
                            "the coordinator does not listen on port {port} {COORDINATOR_START:?} \
                             after it started (taken by another process meanwhile?)"
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }
}

/// How long [`DataParallel::start_coordinator`] waits for its ports to listen.
const COORDINATOR_START: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ports_outgoing_connections_may_take_are_refused() {
        let ephemeral = EphemeralPorts::parse("32768 60999", "40000-40001");
        let check = |address: &str| {
            let node = NodeConfig::new(1, 2, "10.0.0.1:29400", address).unwrap();
            check_node_ports(&node, ephemeral.as_ref())
        };
        assert!(check("10.0.0.2:29500").is_ok());
        assert!(
            check("10.0.0.2:40000").is_ok(),
            "reserved ports are never taken"
        );
        for (address, taken) in [("h:32767", 32768), ("h:32841", 32841), ("h:60999", 60999)] {
            let error = check(address).unwrap_err().to_string();
            assert!(error.contains(&format!("{taken} lies in")), "{error}");
            assert!(error.contains("ip_local_reserved_ports"), "{error}");
        }
        let unknown = NodeConfig::new(1, 2, "h:1", "h:40100").unwrap();
        assert!(
            check_node_ports(&unknown, None).is_ok(),
            "nothing to check against"
        );
    }

    #[test]
    fn node_ports_in_use_are_refused() {
        let taken = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let node = NodeConfig::new(1, 2, "h:1", format!("h:{port}")).unwrap();
        let error = check_node_ports_free(&node).unwrap_err().to_string();
        assert!(error.contains(&format!("on port {port}")), "{error}");
        drop(taken);
    }

    #[test]
    fn node_ports_next_to_the_coordinator_it_starts_are_refused() {
        for node_port in [29399, 29400, 29401] {
            let node = NodeConfig::new(0, 2, "10.0.0.1:29400", format!("10.0.0.1:{node_port}"));
            let error = check_node_ports_free(&node.unwrap())
                .unwrap_err()
                .to_string();
            assert!(error.contains("share a port"), "{error}");
        }
    }

    #[test]
    fn the_coordinator_listens_on_both_ports_once_started() {
        let port = loop {
            let listener = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
            let port = listener.local_addr().unwrap().port();
            if port < u16::MAX && std::net::TcpListener::bind(("0.0.0.0", port + 1)).is_ok() {
                break port;
            }
        };
        DataParallel::start_coordinator(port).unwrap();
        for port in [port, port + 1] {
            assert!(
                TcpStream::connect(("127.0.0.1", port)).is_ok(),
                "port {port}"
            );
        }
        // It runs once per process: again on its port is nothing, on another an error.
        DataParallel::start_coordinator(port).unwrap();
        let error = DataParallel::start_coordinator(port + 2).unwrap_err();
        assert!(
            error.to_string().contains("already runs a coordinator"),
            "{error}"
        );
    }

    #[test]
    fn multi_node_runs_ask_for_one_tokio_worker() {
        assert!(check_one_tokio_worker(Some("1")).is_ok());
        for workers in [None, Some("2"), Some("")] {
            let error = check_one_tokio_worker(workers).unwrap_err().to_string();
            assert!(error.contains("TOKIO_WORKER_THREADS=1"), "{error}");
        }
    }
}
