//! Where a node stands in a multi-node data-parallel run: its rank, the node count, the
//! coordinator's address and its own, from a struct or from the usual environment variables.

use crate::{Error, Result};

/// One node of a multi-node run (burn-collective's global level: one process per node,
/// peer-to-peer over the network, with a global coordinator).
///
/// Every node runs the same number of devices; replica `local` of node `n` has global rank
/// `n × devices + local`. Node 0 starts the coordinator in its own process unless
/// [`start_coordinator`](Self::start_coordinator) says otherwise.  Each node process needs
/// `TOKIO_WORKER_THREADS=1` in its environment (burn-collective 0.21's runtime loses wake-ups
/// with more workers; [`DataParallel::run`](crate::DataParallel::run) refuses to start without).
///
/// ```
/// use kiln_ml_train::NodeConfig;
///
/// let node = NodeConfig::new(1, 2, "10.0.0.1:29400", "10.0.0.2:29500").unwrap();
/// assert!(!node.start_coordinator);
/// assert_eq!(node.node_rank, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node, counted from zero.
    pub node_rank: u32,
    /// The number of nodes (processes), each with the same number of devices.
    pub num_nodes: u32,
    /// `host:port` of the coordinator (burn-collective's global orchestrator); it also listens
    /// on the next port.
    pub coordinator: String,
    /// `host:port` where this node serves its tensors to the other nodes, and the next port too.
    pub node_address: String,
    /// Whether this process starts the coordinator (by default, node 0 does).
    pub start_coordinator: bool,
}

impl NodeConfig {
    /// Node `node_rank` of `num_nodes`, reaching the coordinator at `coordinator` and serving
    /// its tensors at `node_address` (both `host:port`).
    pub fn new(
        node_rank: u32,
        num_nodes: u32,
        coordinator: impl Into<String>,
        node_address: impl Into<String>,
    ) -> Result<Self> {
        let config = Self {
            node_rank,
            num_nodes,
            coordinator: coordinator.into(),
            node_address: node_address.into(),
            start_coordinator: node_rank == 0,
        };
        config.validate()?;
        Ok(config)
    }

    /// Reads the node's place from the environment, `None` when `KILN_NUM_NODES` (or `NNODES`,
    /// as job scripts often name it) is unset or 1:
    ///
    /// | variable | meaning | fallback |
    /// |---|---|---|
    /// | `KILN_NUM_NODES` | number of nodes | `NNODES` |
    /// | `KILN_NODE_RANK` | this node, from 0 | `NODE_RANK` |
    /// | `KILN_COORDINATOR` | coordinator `host:port` | `MASTER_ADDR`:`MASTER_PORT` |
    /// | `KILN_NODE_ADDRESS` | this node's `host:port` for tensor transfers | none |
    /// | `KILN_START_COORDINATOR` | `1`/`0`: start the coordinator here | node rank 0 |
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (for tests and launchers).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let read = |names: &[&'static str]| -> Option<(&'static str, String)> {
            names
                .iter()
                .find_map(|name| lookup(name).map(|value| (*name, value)))
        };
        let number = |names: &[&'static str]| -> Result<Option<u32>> {
            match read(names) {
                None => Ok(None),
                Some((name, value)) => value.trim().parse().map(Some).map_err(|_| {
                    invalid(format!("{name}={value:?} is not a non-negative integer"))
                }),
            }
        };
        let num_nodes = number(&["KILN_NUM_NODES", "NNODES"])?.unwrap_or(1);
        if num_nodes <= 1 {
            return Ok(None);
        }
        let node_rank = number(&["KILN_NODE_RANK", "NODE_RANK"])?
            .ok_or_else(|| invalid("KILN_NODE_RANK (or NODE_RANK) is not set".to_owned()))?;
        let coordinator = match read(&["KILN_COORDINATOR"]) {
            Some((_, address)) => address,
            None => match (lookup("MASTER_ADDR"), lookup("MASTER_PORT")) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                _ => {
                    return Err(invalid(
                        "KILN_COORDINATOR (or MASTER_ADDR and MASTER_PORT) is not set".to_owned(),
                    ));
                }
            },
        };
        let node_address = read(&["KILN_NODE_ADDRESS"])
            .map(|(_, address)| address)
            .ok_or_else(|| invalid("KILN_NODE_ADDRESS is not set".to_owned()))?;
        let mut config = Self::new(node_rank, num_nodes, coordinator, node_address)?;
        if let Some((name, value)) = read(&["KILN_START_COORDINATOR"]) {
            config.start_coordinator = match value.trim() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err(invalid(format!("{name}={value:?} is not 1 or 0"))),
            };
        }
        Ok(Some(config))
    }

    /// Checks the ranks and both addresses.
    pub fn validate(&self) -> Result<()> {
        if self.num_nodes == 0 || self.node_rank >= self.num_nodes {
            return Err(invalid(format!(
                "node rank {} is not below the node count {}",
                self.node_rank, self.num_nodes
            )));
        }
        split("the coordinator address", &self.coordinator)?;
        split("the node address", &self.node_address)?;
        Ok(())
    }

    /// The coordinator's port; sessions also use the next one. Fails as
    /// [`validate`](Self::validate) does when `coordinator` (a public field) is not
    /// `host:port`.
    pub fn coordinator_port(&self) -> Result<u16> {
        Ok(self.coordinator_host_port()?.1)
    }

    /// The port this node serves tensors on; sessions also use the next one. Fails as
    /// [`validate`](Self::validate) does when `node_address` is not `host:port`.
    pub fn node_port(&self) -> Result<u16> {
        Ok(self.node_host_port()?.1)
    }

    pub(crate) fn coordinator_host_port(&self) -> Result<(&str, u16)> {
        split("the coordinator address", &self.coordinator)
    }

    pub(crate) fn node_host_port(&self) -> Result<(&str, u16)> {
        split("the node address", &self.node_address)
    }
}

/// The host and port of a `host:port` address (the port below 65535: sessions use the next one
/// too), or an error naming the address.
fn split<'a>(what: &str, address: &'a str) -> Result<(&'a str, u16)> {
    address
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty() && !host.contains("://"))
        .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
        .filter(|(_, port)| (1..u16::MAX).contains(port))
        .ok_or_else(|| {
            invalid(format!(
                "{what} {address:?} is not `host:port` with a port from 1 to 65534"
            ))
        })
}

fn invalid(reason: String) -> Error {
    Error::InvalidDataParallel { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn one_node_needs_no_variables() {
        assert_eq!(NodeConfig::from_lookup(lookup(&[])).unwrap(), None);
        let single = [("KILN_NUM_NODES", "1")];
        assert_eq!(NodeConfig::from_lookup(lookup(&single)).unwrap(), None);
    }

    #[test]
    fn reads_kiln_and_torchrun_variables() {
        let kiln = [
            ("KILN_NUM_NODES", "2"),
            ("KILN_NODE_RANK", "1"),
            ("KILN_COORDINATOR", "127.0.0.1:29400"),
            ("KILN_NODE_ADDRESS", "127.0.0.1:29501"),
        ];
        let node = NodeConfig::from_lookup(lookup(&kiln)).unwrap().unwrap();
        assert_eq!((node.node_rank, node.num_nodes), (1, 2));
        assert_eq!(node.coordinator_port().unwrap(), 29400);
        assert_eq!(node.node_port().unwrap(), 29501);
        assert!(!node.start_coordinator);

        let torchrun = [
            ("NNODES", "3"),
            ("NODE_RANK", "0"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("KILN_NODE_ADDRESS", "10.0.0.1:29500"),
        ];
        let node = NodeConfig::from_lookup(lookup(&torchrun)).unwrap().unwrap();
        assert_eq!(node.coordinator, "10.0.0.1:29400");
        assert!(node.start_coordinator);
    }

    #[test]
    fn errors_name_the_variable() {
        let cases: [(&[(&str, &str)], &str); 4] = [
            (&[("KILN_NUM_NODES", "two")], "KILN_NUM_NODES"),
            (&[("KILN_NUM_NODES", "2")], "KILN_NODE_RANK"),
            (
                &[("KILN_NUM_NODES", "2"), ("KILN_NODE_RANK", "0")],
                "KILN_COORDINATOR",
            ),
            (
                &[
                    ("KILN_NUM_NODES", "2"),
                    ("KILN_NODE_RANK", "2"),
                    ("KILN_COORDINATOR", "h:1"),
                    ("KILN_NODE_ADDRESS", "h:2"),
                ],
                "node rank 2",
            ),
        ];
        for (vars, expected) in cases {
            let error = NodeConfig::from_lookup(lookup(vars))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{vars:?}: {error}");
        }
        let error = NodeConfig::new(0, 2, "no-port", "h:1")
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"no-port\""), "{error}");
    }
}
