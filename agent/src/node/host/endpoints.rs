//! The endpoint table (`crate::node::dns::EndpointTable`) built after a round, from the shell's view:
//! the specs, the members and their addresses, the peers' gossiped instances and this node's
//! own. Built again only when one of them moved; published for the DNS server and the API.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use shoal_core::reconcile::InstanceStatus;

use super::{Host, HostLoop};
use crate::node::dns::{EndpointTable, HostInfo, TableInput};
use crate::state::mesh::view::Member;

impl Host {
    /// Every workload's endpoints as of the last round that moved them.
    pub fn endpoints(&self) -> Arc<EndpointTable> {
        self.endpoints.lock().expect("endpoints lock").clone()
    }
}

impl HostLoop {
    /// Builds and publishes the endpoint table at `now` (monotonic ms) when the members, the
    /// peers' instances, the specs or this node's instances moved since it was last built, at
    /// most once per [`ENDPOINTS_REBUILD_MIN_MS`]: a change that comes sooner waits for the
    /// first round past it (a round comes at least every tick), so a lone change (a host's
    /// death, a failing probe) shows at once and a stream of them (a cell of hundreds starting
    /// its replicas) costs one build a second, not one a round.
    pub(super) fn refresh_endpoints(&mut self, observed: &[InstanceStatus], now: u64) {
        let generation = self.shell.endpoints_generation();
        let members = self.shell.members();
        let hosts_hash = hosts_hash(members);
        if let Some(at) = &self.endpoints_at {
            let same = at.generation == generation
                && at.own.as_slice() == observed
                && at.hosts_hash == hosts_hash;
            if same || now < at.built_ms.saturating_add(ENDPOINTS_REBUILD_MIN_MS) {
                return;
            }
        }
        let hosts: BTreeMap<String, HostInfo> = members
            .iter()
            .map(|m| (m.name.clone(), host_info(m)))
            .collect();
        let input = self.shell.input();
        let table = EndpointTable::build(&TableInput {
            specs: &input.specs,
            hosts: &hosts,
            me: &self.host.node.name,
            own: observed,
            peers: &input.peers,
        });
        *self.host.endpoints.lock().expect("endpoints lock") = Arc::new(table);
        self.endpoints_at = Some(EndpointsAt {
            generation,
            own: observed.to_vec(),
            hosts_hash,
            built_ms: now,
        });
    }
}

/// What the endpoint table was last built from.
pub(super) struct EndpointsAt {
    /// [`ShellState::endpoints_generation`](super::input::ShellState::endpoints_generation).
    generation: u64,
    /// This node's own instances.
    own: Vec<InstanceStatus>,
    /// [`hosts_hash`] of the members.
    hosts_hash: u64,
    /// When it was built (monotonic ms).
    built_ms: u64,
}

/// The least time between two builds of the endpoint table, ms (see
/// [`HostLoop::refresh_endpoints`]).
pub const ENDPOINTS_REBUILD_MIN_MS: u64 = 1_000;

/// A hash of what the table reads of the members: each one's name, address and liveness (a
/// record's other fields, such as its free resources, move often and the table does not read
/// them). A hash, not a copy: holding each agent's previous list of members kept a second copy
/// of every member alive per agent. Two lists that differ in those and hash alike (odds of
/// 2^-64) would leave the table as it was until the next change.
fn hosts_hash(members: &[Member]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for m in members {
        m.name.hash(&mut h);
        let info = host_info(m);
        info.addr.hash(&mut h);
        info.live.hash(&mut h);
    }
    h.finish()
}

/// A member's address: the IP of its API address, or of its gossip address when the API is
/// bound to an unspecified address (`0.0.0.0`); `None` when both are.
fn host_info(member: &Member) -> HostInfo {
    let api = member.record.as_ref().map(|r| r.api_addr.ip());
    let gossip = member.id.gossip_advertise_addr.ip();
    let addr = api
        .into_iter()
        .chain([gossip])
        .find(|ip: &IpAddr| !ip.is_unspecified());
    HostInfo {
        addr,
        live: member.alive,
    }
}
