//! [`EndpointTable`]: where every replica of every workload runs and whether it serves, as this
//! agent knows it from gossip. Built by the host loop after a round in which something moved,
//! read by the DNS server and by `shoal endpoints`. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::net::IpAddr;

use shoal_core::reconcile::{InstanceStatus, SpecEntry};
use shoal_core::spec::Run;

/// Most endpoints kept for one workload (copies during a handoff included); the rest are left
/// out, lowest replica index first kept.
pub const ENDPOINTS_PER_WORKLOAD_MAX: usize = 4096;

/// What the table needs to know of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The address its agent advertises (the IP of its API address); `None` when unknown or
    /// unspecified (`0.0.0.0`): such a node's replicas are listed but never answered in DNS.
    pub addr: Option<IpAddr>,
    /// The failure detector holds it live (this agent itself always is).
    pub live: bool,
}

pub use crate::wire::endpoints::{Endpoint, PublishedPort, WorkloadEndpoints};

/// The inputs of [`EndpointTable::build`].
pub struct TableInput<'a> {
    /// The live specs, by workload name.
    pub specs: &'a BTreeMap<String, SpecEntry>,
    /// Every known node, by name.
    pub hosts: &'a BTreeMap<String, HostInfo>,
    /// This agent's node name and its own observed instances (fresher than its gossip).
    pub me: &'a str,
    /// This agent's own observed instances.
    pub own: &'a [InstanceStatus],
    /// The peers' observed instances, by node name, as gossiped (this node's entry ignored).
    pub peers: &'a BTreeMap<String, Vec<InstanceStatus>>,
}

/// Every workload's endpoints, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointTable {
    workloads: BTreeMap<String, WorkloadEndpoints>,
}

impl EndpointTable {
    /// The table for `input`. Instances of workloads without a live spec, or with a replica
    /// index past the spec's count, are left out (they are on their way out).
    pub fn build(input: &TableInput<'_>) -> EndpointTable {
        let mut workloads: BTreeMap<String, WorkloadEndpoints> = input
            .specs
            .iter()
            .map(|(name, entry)| (name.clone(), empty(name, entry)))
            .collect();
        let peers = input
            .peers
            .iter()
            .filter(|(node, _)| node.as_str() != input.me)
            .map(|(node, list)| (node.as_str(), list.as_slice()));
        for (node, list) in std::iter::once((input.me, input.own)).chain(peers) {
            let host = input.hosts.get(node);
            let addr = host.and_then(|h| h.addr);
            let node_live = node == input.me || host.is_some_and(|h| h.live);
            for status in list.iter().filter(|s| s.handle.is_some()) {
                let Some(w) = workloads.get_mut(&status.replica.workload) else {
                    continue;
                };
                if status.replica.replica >= w.replicas {
                    continue;
                }
                let healthy = status.healthy;
                // Only the names the spec declares (at most NAMED_PORTS_MAX): a peer's gossip
                // cannot make an endpoint larger than that.
                let ports = status
                    .ports
                    .iter()
                    .filter(|(name, _)| w.ports.iter().any(|p| p.name.as_ref() == Some(*name)))
                    .map(|(name, port)| (name.clone(), *port))
                    .collect();
                w.endpoints.push(Endpoint {
                    replica: status.replica.replica,
                    node: node.to_string(),
                    addr,
                    phase: status.phase.as_str().to_string(),
                    healthy,
                    node_live,
                    serving: healthy && node_live && addr.is_some(),
                    ports,
                });
            }
        }
        for w in workloads.values_mut() {
            w.endpoints
                .sort_by(|a, b| (a.replica, &a.node).cmp(&(b.replica, &b.node)));
            w.endpoints.truncate(ENDPOINTS_PER_WORKLOAD_MAX);
        }
        EndpointTable { workloads }
    }

    /// One workload's endpoints (`name` as stored: lowercase).
    pub fn get(&self, name: &str) -> Option<&WorkloadEndpoints> {
        self.workloads.get(name)
    }

    /// How many workloads it knows.
    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    /// Whether it knows no workload.
    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }
}

fn empty(name: &str, entry: &SpecEntry) -> WorkloadEndpoints {
    let ports = match &entry.spec.run {
        Run::Container(c) => c
            .ports
            .iter()
            .map(|port| PublishedPort {
                name: port.name.clone(),
                container: Some(port.container),
                host: port.host,
                protocol: port.protocol.as_str().to_string(),
            })
            .collect(),
        Run::Process(p) => p
            .ports
            .iter()
            .map(|port| PublishedPort {
                name: Some(port.name.clone()),
                container: None,
                host: port.port,
                protocol: port.protocol.as_str().to_string(),
            })
            .collect(),
    };
    WorkloadEndpoints {
        name: name.to_string(),
        replicas: entry.spec.replicas,
        ports,
        endpoints: Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use shoal_core::instance::Phase;
    use shoal_core::placement::model::ReplicaId;

    /// A spec entry for `name` with `replicas`, a process, or a container publishing `ports`
    /// (container port, host port).
    pub fn spec(name: &str, replicas: u32, ports: &[(u16, Option<u16>)]) -> SpecEntry {
        let mut text = format!("name = \"{name}\"\nreplicas = {replicas}\n");
        if ports.is_empty() {
            text.push_str("[process]\ncommand = [\"sleep\", \"1\"]\n");
        } else {
            let list: Vec<String> = ports
                .iter()
                .map(|(c, h)| match h {
                    Some(h) => format!("{{ container = {c}, host = {h} }}"),
                    None => format!("{{ container = {c} }}"),
                })
                .collect();
            text.push_str(&format!(
                "[container]\nimage = \"busybox\"\nports = [{}]\n",
                list.join(", ")
            ));
        }
        text.push_str("[resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n");
        let spec = shoal_core::spec::WorkloadSpec::from_toml_str(&text, "t.toml").expect("spec");
        SpecEntry {
            version: "1".into(),
            spec: std::sync::Arc::new(spec),
            paused: false,
        }
    }

    /// An instance of `workload` replica `replica`, healthy or not.
    pub fn status(workload: &str, replica: u32, healthy: bool) -> InstanceStatus {
        let phase = if healthy {
            Phase::Running
        } else {
            Phase::Starting
        };
        let handle = Some(format!("{workload}-{replica}"));
        InstanceStatus::new(ReplicaId::new(workload, replica), handle, phase, "1")
    }

    /// Three nodes n1..n3 at 10.0.0.1..3 (n3 not live), `web` (3 replicas, ports 80 -> 8080
    /// and 9000 with no host port) and `pg` (2 replicas, a process), `web/2` unhealthy, `pg/1`
    /// on the dead n3.
    pub fn sample() -> EndpointTable {
        let specs = BTreeMap::from([
            (
                "web".to_string(),
                spec("web", 3, &[(80, Some(8080)), (9000, None)]),
            ),
            ("pg".to_string(), spec("pg", 2, &[])),
            ("idle".to_string(), spec("idle", 1, &[])),
        ]);
        let host = |i: u8, live| HostInfo {
            addr: Some(IpAddr::from([10, 0, 0, i])),
            live,
        };
        let hosts = BTreeMap::from([
            ("n1".to_string(), host(1, true)),
            ("n2".to_string(), host(2, true)),
            ("n3".to_string(), host(3, false)),
        ]);
        let own = vec![status("web", 0, true), status("pg", 0, true)];
        let peers = BTreeMap::from([
            (
                "n2".to_string(),
                vec![status("web", 1, true), status("web", 2, false)],
            ),
            ("n3".to_string(), vec![status("pg", 1, true)]),
            ("n1".to_string(), vec![status("web", 2, true)]),
        ]);
        EndpointTable::build(&TableInput {
            specs: &specs,
            hosts: &hosts,
            me: "n1",
            own: &own,
            peers: &peers,
        })
    }

    #[test]
    fn serving_follows_health_and_liveness() {
        let table = sample();
        let web = table.get("web").unwrap();
        assert_eq!(web.endpoints.len(), 3, "n1's own gossip is ignored");
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        assert_eq!(web.serving_addrs(None), vec![ip(1), ip(2)]);
        assert_eq!(web.serving_addrs(Some(2)), Vec::<IpAddr>::new());
        let pg = table.get("pg").unwrap();
        assert_eq!(pg.serving_addrs(None), vec![ip(1)], "n3 is not live");
        assert!(!pg.endpoints[1].serving && pg.endpoints[1].healthy);
        assert!(table.get("idle").unwrap().endpoints.is_empty());
        assert_eq!(web.ports[0].host, Some(8080));
    }

    #[test]
    fn replicas_past_the_count_and_unknown_workloads_are_left_out() {
        let specs = BTreeMap::from([("a".to_string(), spec("a", 1, &[]))]);
        let hosts = BTreeMap::new();
        let own = vec![
            status("a", 0, true),
            status("a", 1, true),
            status("b", 0, true),
        ];
        let table = EndpointTable::build(&TableInput {
            specs: &specs,
            hosts: &hosts,
            me: "n1",
            own: &own,
            peers: &BTreeMap::new(),
        });
        assert_eq!(table.len(), 1);
        let a = table.get("a").unwrap();
        assert_eq!(a.endpoints.len(), 1);
        assert!(!a.endpoints[0].serving, "no address known for n1");
    }
}
