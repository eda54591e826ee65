//! The membership view: chitchat's node states turned into node records, the placement inputs
//! derived from them, and the workloads derived from the store.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use chitchat::{Chitchat, ChitchatId};
use shoal_core::placement::model::{Node, Spread, Workload};
use shoal_core::spec::{self, WorkloadSpec};
use shoal_core::store::Entry;

use super::api::NodeView;
use super::record::{NodeRecord, DIGEST_KEY, NODE_KEY};

/// Chitchat key an agent sets when it leaves gracefully: peers stop counting it at once.
pub const LEAVING_KEY: &str = "leaving";

/// Chitchat key an agent sets while its store is stale (out of sync longer than the tombstone
/// grace): it waits for a peer that is not stale to resynchronize from.
pub const STALE_KEY: &str = "stale";

/// Longest spec body accepted from the store, in bytes.
pub const SPEC_BYTES_MAX: usize = 256 * 1024;

/// One member as this agent sees it.
#[derive(Clone, Debug)]
pub struct Member {
    /// Node id.
    pub name: String,
    /// Chitchat identity (node id, generation, gossip address).
    pub id: ChitchatId,
    /// Live by the failure detector and not leaving.
    pub alive: bool,
    /// Its record, when it has published a valid one.
    pub record: Option<NodeRecord>,
    /// Its store digest summary (hex), when published.
    pub digest: Option<String>,
    /// Its store is stale and waits to resynchronize.
    pub stale: bool,
    /// It announced a graceful leave.
    pub leaving: bool,
}

/// Every known member, one per node id, sorted by node id. Where several identities claim one
/// name, the live one with the lowest generation wins (the incumbent: a second agent claiming a
/// name in use is ignored), and where none is live, the newest.
pub fn members(chitchat: &Chitchat) -> Vec<Member> {
    let live: std::collections::HashSet<&ChitchatId> = chitchat.live_nodes().collect();
    let mut by_name: BTreeMap<String, Member> = BTreeMap::new();
    for (id, state) in chitchat.node_states() {
        let leaving = state.get(LEAVING_KEY).is_some();
        let alive = !leaving && live.contains(&id);
        let record = state.get(NODE_KEY).and_then(|t| NodeRecord::decode(t).ok());
        let member = Member {
            name: id.node_id.to_string(),
            id: id.clone(),
            alive,
            record,
            digest: state.get(DIGEST_KEY).map(str::to_string),
            stale: state.get(STALE_KEY).is_some(),
            leaving,
        };
        let replaces = match by_name.get(&member.name) {
            None => true,
            Some(seen) => match (seen.alive, member.alive) {
                (true, true) => member.id.generation_id < seen.id.generation_id,
                (false, true) => true,
                (true, false) => false,
                (false, false) => member.id.generation_id > seen.id.generation_id,
            },
        };
        if replaces {
            by_name.insert(member.name.clone(), member);
        }
    }
    by_name.into_values().collect()
}

/// Another live identity using `me`'s name from a different address: a second agent with this
/// name is already in the mesh.
pub fn name_taken_by(chitchat: &Chitchat, me: &ChitchatId) -> Option<SocketAddr> {
    chitchat
        .live_nodes()
        .find(|id| {
            id.node_id == me.node_id
                && id.gossip_advertise_addr != me.gossip_advertise_addr
                && id.generation_id != me.generation_id
        })
        .map(|id| id.gossip_advertise_addr)
}

/// The placement inputs: live members with a record, sorted by id.
pub fn placement_nodes(members: &[Member]) -> Vec<Node> {
    members
        .iter()
        .filter(|m| m.alive)
        .filter_map(|m| m.record.as_ref().map(|r| r.placement_node(&m.name)))
        .collect()
}

/// The API addresses of live peers (not `me`), sorted by node id.
pub fn live_peer_apis(members: &[Member], me: &str) -> Vec<(String, SocketAddr)> {
    members
        .iter()
        .filter(|m| m.alive && m.name != me)
        .filter_map(|m| m.record.as_ref().map(|r| (m.name.clone(), r.api_addr)))
        .collect()
}

/// The `nodes` answer.
pub fn node_views(members: &[Member]) -> Vec<NodeView> {
    members
        .iter()
        .map(|m| NodeView {
            name: m.name.clone(),
            alive: m.alive,
            zone: m
                .record
                .as_ref()
                .map(|r| r.zone.clone())
                .unwrap_or_default(),
            cpu_millis: m.record.as_ref().map_or(0, |r| r.cpu_millis),
            memory_bytes: m.record.as_ref().map_or(0, |r| r.memory_bytes),
            draining: m.record.as_ref().is_some_and(|r| r.draining),
            gossip_addr: m.id.gossip_advertise_addr.to_string(),
            api_addr: m.record.as_ref().map(|r| r.api_addr.to_string()),
            agent_version: m.record.as_ref().map(|r| r.agent_version.clone()),
        })
        .collect()
}

/// Encodes a spec as a store body.
pub fn encode_spec(spec: &WorkloadSpec) -> Vec<u8> {
    bincode::serde::encode_to_vec(spec, crate::wire::bincode_config())
        .expect("a workload spec always encodes")
}

/// Decodes a store body into a spec, with a size limit and a re-validation: a body written by a
/// buggy or hostile peer is an error, never a panic or a half-read spec.
pub fn decode_spec(bytes: &[u8]) -> Result<WorkloadSpec, String> {
    if bytes.len() > SPEC_BYTES_MAX {
        return Err(format!(
            "spec body of {} bytes is over the limit",
            bytes.len()
        ));
    }
    let spec: WorkloadSpec = crate::wire::decode_body::<WorkloadSpec, SPEC_BYTES_MAX>(bytes)
        .map_err(|e| e.to_string())?;
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// The live specs in a store, by name; undecodable bodies are skipped and returned as errors.
pub fn live_specs<'a>(
    entries: impl Iterator<Item = &'a Entry>,
) -> (Vec<(WorkloadSpec, String)>, Vec<String>) {
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        let Some(body) = entry.body.live() else {
            continue;
        };
        match decode_spec(body) {
            Ok(spec) => specs.push((spec, entry.version.to_string())),
            Err(e) => errors.push(format!("{}: {e}", entry.name)),
        }
    }
    (specs, errors)
}

/// The placement engine's view of a spec.
pub fn placement_workload(spec: &WorkloadSpec) -> Workload {
    Workload {
        id: spec.name.clone(),
        replicas: spec.replicas,
        request: spec.resources,
        spread: match spec.placement.spread {
            spec::Spread::Node => Spread::Node,
            spec::Spread::Zone => Spread::Zone,
        },
        constraints: spec.placement.constraints.clone(),
        exclusive: spec.placement.exclusive,
        priority: spec.placement.priority,
    }
}
