//! A workload's endpoints as `shoal endpoints` and DNS see them: which replica runs where, at
//! which address and ports, and whether it serves. Built by [`crate::node::dns`]'s table.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// A port a workload declares (a process's named port, a container's published port), as the
/// spec says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPort {
    /// Its name, if it has one: each instance's number is in [`Endpoint::ports`], and DNS
    /// answers `_NAME._tcp.WORKLOAD`.
    pub name: Option<String>,
    /// The port inside the container; `None` for a process.
    pub container: Option<u16>,
    /// The fixed host port; `None` when the agent allocates it per instance (named) or the
    /// engine picks it (unnamed: then unknown here, and not in DNS).
    pub host: Option<u16>,
    /// `tcp` or `udp`.
    pub protocol: String,
}

/// One instance of one replica, on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The replica index.
    pub replica: u32,
    /// The node it runs on.
    pub node: String,
    /// That node's advertised address, if known.
    pub addr: Option<IpAddr>,
    /// The instance's phase (`pending`, `starting`, `running`, ...), as its node reports it.
    pub phase: String,
    /// The node reports it healthy (running, not being stopped, its probe passing).
    pub healthy: bool,
    /// The node is live in this agent's failure detector.
    pub node_live: bool,
    /// Healthy, on a live node with a known address: what DNS answers.
    pub serving: bool,
    /// The host port of each named port of this instance (allocated or fixed), by name.
    pub ports: BTreeMap<String, u16>,
}

/// One workload's endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadEndpoints {
    /// The workload.
    pub name: String,
    /// Replicas the spec asks for.
    pub replicas: u32,
    /// The ports it declares: a container's published ports, a process's named ports.
    pub ports: Vec<PublishedPort>,
    /// Every instance any node reports, by replica then node.
    pub endpoints: Vec<Endpoint>,
}

impl WorkloadEndpoints {
    /// The distinct addresses of the serving instances (of one replica when given), in order.
    pub fn serving_addrs(&self, replica: Option<u32>) -> Vec<IpAddr> {
        let mut addrs: Vec<IpAddr> = self
            .endpoints
            .iter()
            .filter(|e| e.serving && replica.is_none_or(|r| e.replica == r))
            .filter_map(|e| e.addr)
            .collect();
        addrs.sort();
        addrs.dedup();
        addrs
    }

    /// The serving instances, one per (replica, address), in replica order.
    pub fn serving(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints.iter().filter(|e| e.serving)
    }
}
