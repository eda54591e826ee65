//! Builds the reconciler's input from the store, the gossip view and the runtime.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chitchat::ChitchatId;
use shoal_core::placement::Placement;
use shoal_core::reconcile::{InstanceStatus, Membership, ReconcileInput, SpecEntry};
use shoal_core::stacking::place_stacked;

use super::{Host, INSTANCES_KEY};
use crate::mesh::view::{self, Member};

/// How long after start the view counts as suspect unless the store synced with a peer first.
pub const START_SUSPECT_MS: u64 = 10_000;
/// Longest observed-state value accepted from a peer, in bytes.
pub const INSTANCES_BYTES_MAX: usize = 512 * 1024;

/// Caches the shell keeps between rounds.
#[derive(Default)]
pub struct ShellState {
    /// Peers' observed state, by chitchat id, with the chitchat version it was decoded at.
    statuses: HashMap<ChitchatId, (u64, Vec<InstanceStatus>)>,
    /// The store digest the specs were decoded at.
    specs_digest: Option<u64>,
    specs: BTreeMap<String, SpecEntry>,
    placement_key: Option<u64>,
    /// The last placement computed.
    pub placement: Arc<Placement>,
    /// Peers' observed state that failed to decode, counted.
    pub statuses_rejected: u64,
}

impl ShellState {
    /// The specs as last decoded.
    pub fn specs_snapshot(&self) -> BTreeMap<String, SpecEntry> {
        self.specs.clone()
    }
}

/// Reads everything the reconciler needs for one round at `now`.
pub async fn build(host: &Host, shell: &mut ShellState, now: u64) -> ReconcileInput {
    let node = &host.node;
    let (members, dead, peers) = {
        let chitchat = node.gossip().chitchat();
        let guard = chitchat.lock().await;
        let members = view::members(&guard);
        let dead: BTreeSet<String> = guard
            .dead_nodes()
            .map(|id| id.node_id.to_string())
            .collect();
        let mut peers: BTreeMap<String, Vec<InstanceStatus>> = BTreeMap::new();
        for member in &members {
            let Some(state) = guard.node_state(&member.id) else {
                continue;
            };
            let Some(value) = state.get_versioned(INSTANCES_KEY) else {
                continue;
            };
            let cached = shell
                .statuses
                .entry(member.id.clone())
                .or_insert((u64::MAX, Vec::new()));
            if cached.0 != value.version {
                let decoded = (value.value.len() <= INSTANCES_BYTES_MAX)
                    .then(|| serde_json::from_str::<Vec<InstanceStatus>>(&value.value).ok())
                    .flatten();
                match decoded {
                    Some(list) => *cached = (value.version, list),
                    None => {
                        shell.statuses_rejected += 1;
                        cached.0 = value.version;
                    }
                }
            }
            peers.insert(member.name.clone(), cached.1.clone());
        }
        (members, dead, peers)
    };
    refresh_specs(host, shell).await;
    refresh_placement(host, shell, &members);
    let live: BTreeSet<String> = members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.clone())
        .collect();
    let members_known = members.iter().filter(|m| !m.leaving).count().max(1);
    // A member that announced its leave, or that the detector neither holds live nor dead, is
    // unreachable: its instances may still run, so exclusive replicas wait (see reconcile.md).
    let unreachable: BTreeSet<String> = members
        .iter()
        .filter(|m| !m.alive && !dead.contains(&m.name))
        .map(|m| m.name.clone())
        .collect();
    let draining = node.record().is_some_and(|r| r.draining);
    let (instances, runtime_unavailable) = match host.runtime.list().await {
        Ok(list) => (list, None),
        Err(e) => (
            Vec::new(),
            Some(format!(
                "the {} runtime cannot be listed: {e}",
                host.runtime.kind()
            )),
        ),
    };
    let view_suspect = if node.is_stale() {
        Some("the store is resynchronizing after a long absence".to_string())
    } else if !node.synced_once() && now < host.started_ms() + START_SUSPECT_MS {
        Some("the agent just started and has not synced with a peer yet".to_string())
    } else {
        None
    };
    let (supports_containers, supports_processes) = support_flags(&host.runtime);
    ReconcileInput {
        specs: shell.specs.clone(),
        owners: shell.placement.assigned.clone(),
        instances,
        runtime_unavailable,
        supports_containers,
        supports_processes,
        peers,
        membership: Membership {
            live,
            dead,
            unreachable,
            members_known,
        },
        draining,
        view_suspect,
    }
}

fn support_flags(runtime: &Arc<dyn crate::runtime::Runtime>) -> (bool, bool) {
    use crate::runtime::RuntimeKind;
    match runtime.kind() {
        RuntimeKind::Process => (false, true),
        RuntimeKind::Docker => (true, false),
        RuntimeKind::Mem => (true, true),
    }
}

async fn refresh_specs(host: &Host, shell: &mut ShellState) {
    let digest = host.node.with_store(|s| s.digest().root_hash()).await;
    if shell.specs_digest == Some(digest) {
        return;
    }
    let (specs, errors) = host
        .node
        .with_store(|s| view::live_specs(s.list_live()))
        .await;
    for e in errors {
        tracing::warn!(error = %e, "a stored spec does not decode; it is left out");
    }
    shell.specs = specs
        .into_iter()
        .map(|(spec, version)| {
            (
                spec.name.clone(),
                SpecEntry {
                    version,
                    spec: Arc::new(spec),
                },
            )
        })
        .collect();
    shell.specs_digest = Some(digest);
}

fn refresh_placement(host: &Host, shell: &mut ShellState, members: &[Member]) {
    use std::hash::Hasher;
    let nodes = view::placement_nodes(members);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for n in &nodes {
        h.write(n.id.as_bytes());
        h.write_u64(n.capacity.cpu_millis);
        h.write_u64(n.capacity.memory_bytes);
        h.write(n.zone.as_bytes());
        h.write_u8(u8::from(n.draining));
        for (k, v) in &n.labels {
            h.write(k.as_bytes());
            h.write(v.as_bytes());
        }
    }
    for (name, entry) in &shell.specs {
        h.write(name.as_bytes());
        h.write(entry.version.as_bytes());
    }
    let key = h.finish();
    if shell.placement_key == Some(key) {
        return;
    }
    let began = std::time::Instant::now();
    let workloads: Vec<_> = shell
        .specs
        .values()
        .map(|e| view::placement_workload(&e.spec))
        .collect();
    shell.placement = Arc::new(place_stacked(&nodes, &workloads));
    shell.placement_key = Some(key);
    host.stats.lock().expect("stats lock").placement_last_us = began.elapsed().as_micros() as u64;
}
