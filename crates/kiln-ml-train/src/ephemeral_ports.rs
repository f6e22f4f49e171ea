//! The machine's ephemeral ports: the range the kernel takes a local port from for each
//! outgoing connection. A node's tensor-service ports must lie outside it.
//!
//! Across nodes kiln runs one burn-collective session per operation, alternating between two
//! tensor-service ports (`collective.rs`), so each port is closed every other operation and
//! bound again the next. While it is closed, any outgoing connection of the machine (kiln's
//! own, to the coordinator and the peers, among them) may be given it as its local port; the
//! next bind then fails, which burn-collective 0.21 only drops, and the peers' downloads from
//! this node are refused or cut off ("Peer closed download connection", `LocalServerMissing`).
//! On Linux `connect` prefers even ports in the range, so the even port of the pair was the one
//! lost: in `tests/multi_node.rs`, whose ports came from the range, 4 runs in about 1,020 failed
//! so (2026-11-28), and none in 1,000 with ports below it.

use std::ops::RangeInclusive;

/// Where Linux keeps the range and the ports taken out of it.
const RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const RESERVED_FILE: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

/// The ports outgoing connections take, less those reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EphemeralPorts {
    range: RangeInclusive<u16>,
    reserved: Vec<RangeInclusive<u16>>,
}

impl EphemeralPorts {
    /// This machine's, read from Linux's settings; `None` where they cannot be read (another
    /// operating system, a restricted `/proc`).
    pub(crate) fn of_this_machine() -> Option<Self> {
        let range = std::fs::read_to_string(RANGE_FILE).ok()?;
        let reserved = std::fs::read_to_string(RESERVED_FILE).unwrap_or_default();
        Self::parse(&range, &reserved)
    }

    /// From the two files' text: `low high`, and a comma-separated list of ports and
    /// `low-high` ranges (empty when none is reserved). An entry of the list it cannot read
    /// reserves nothing: the range is still checked.
    pub(crate) fn parse(range: &str, reserved: &str) -> Option<Self> {
        let mut bounds = range.split_whitespace().map(str::parse::<u16>);
        let (low, high) = (bounds.next()?.ok()?, bounds.next()?.ok()?);
        let reserved = reserved
            .trim()
            .split(',')
            .filter_map(|item| match item.split_once('-') {
                Some((low, high)) => Some(low.trim().parse().ok()?..=high.trim().parse().ok()?),
                None => item.trim().parse().ok().map(|port| port..=port),
            })
            .collect();
        Some(Self {
            range: low..=high,
            reserved,
        })
    }

    /// Whether an outgoing connection may be given `port`.
    pub(crate) fn may_take(&self, port: u16) -> bool {
        self.range.contains(&port) && !self.reserved.iter().any(|ports| ports.contains(&port))
    }

    /// The first and last port of the range.
    pub(crate) fn bounds(&self) -> (u16, u16) {
        (*self.range.start(), *self.range.end())
    }
}

#[cfg(test)]
mod tests {
    use super::EphemeralPorts;

    #[test]
    fn reads_the_range_and_the_reserved_ports() {
        let ports = EphemeralPorts::parse("32768\t60999\n", "40000-40001,50000\n").unwrap();
        assert_eq!(ports.bounds(), (32768, 60999));
        assert!(ports.may_take(32768) && ports.may_take(60999) && ports.may_take(39999));
        assert!(!ports.may_take(32767) && !ports.may_take(61000) && !ports.may_take(29500));
        assert!(!ports.may_take(40000) && !ports.may_take(40001) && !ports.may_take(50000));
        assert!(ports.may_take(40002) && ports.may_take(50001));
    }

    #[test]
    fn nothing_reserved_is_an_empty_file() {
        let ports = EphemeralPorts::parse("1024 65535", "\n").unwrap();
        assert!(ports.may_take(1024) && ports.may_take(65535));
    }

    #[test]
    fn a_range_it_cannot_read_is_no_answer() {
        assert_eq!(EphemeralPorts::parse("", ""), None);
        assert_eq!(EphemeralPorts::parse("32768", ""), None);
        assert_eq!(EphemeralPorts::parse("low high", ""), None);
    }

    #[test]
    fn a_reserved_entry_it_cannot_read_reserves_nothing() {
        let ports = EphemeralPorts::parse("32768 60999", "4000x,40000").unwrap();
        assert!(!ports.may_take(40000));
        assert!(ports.may_take(40001));
    }
}
