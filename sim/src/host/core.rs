//! [`CoreHost`]: the real reconciler (`shoal_core::reconcile::Reconciler`) on the agent's real
//! in-memory runtime (`shoal::runtime::mem::MemRuntime`), fed by a thin shell written here until
//! the agent's own host loop lands: the view from gossip and the store, the placement from the
//! real core, the actions executed on the runtime, the observed state gossiped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chitchat::ChitchatId;
use shoal::mesh::api::{Request, Response};
use shoal::mesh::view::placement_workload;
use shoal::runtime::mem::MemProfile;
use shoal::runtime::{ProbeOutcome, Runtime, StartRequest};
use shoal::tls::PeerName;
use shoal_core::instance::ReplicaId;
use shoal_core::placement::{place, Placement};
use shoal_core::reconcile::{
    Action, InstanceStatus, Membership, ReconcileConfig, ReconcileInput, Reconciler, SpecEntry,
};
use tokio::sync::mpsc;

use super::view::{Peer, ViewCache};
use super::{HostEnv, HostLoop};
use crate::scenario::{HostConfig, InstanceProfile};

/// Chitchat key under which this shell gossips `Reconciler::observed` (JSON).
pub const STATUS_KEY: &str = "sim.status";

/// The real reconciler and runtime behind the simulator's shell.
pub struct CoreHost;

impl HostLoop for CoreHost {
    fn spawn(&self, env: HostEnv) -> tokio::task::JoinHandle<()> {
        tokio::spawn(run(env))
    }

    fn name(&self) -> &'static str {
        "core"
    }
}

/// The reconciler's timers from the scenario's host section (the rest at their defaults).
pub fn reconcile_config(h: &HostConfig) -> ReconcileConfig {
    ReconcileConfig {
        stop_grace_ms: h.stop_ms,
        orphan_handoff_max_ms: h.handoff_max_ms,
        self_fence_ms: h.fence_timeout_ms,
        fence_stop_grace_ms: h.stop_ms.min(h.fence_timeout_ms),
        fencing_delay_ms: h.fence_delay_ms,
        ..ReconcileConfig::default()
    }
}

pub(crate) fn mem_profile(p: &InstanceProfile) -> MemProfile {
    MemProfile {
        start_latency: Duration::from_millis(p.start_ms),
        start_fail_probability: p.start_fail,
        exit_after: p
            .crash_after_ms
            .map(|d| Duration::from_millis(p.start_ms + d)),
        ..MemProfile::default()
    }
}

enum Feedback {
    StartFailed(ReplicaId, String),
}

#[derive(Default)]
struct Shell {
    view: ViewCache,
    statuses: HashMap<ChitchatId, (u64, Vec<InstanceStatus>)>,
    digest: Vec<u8>,
    specs: BTreeMap<String, SpecEntry>,
    placement_key: u64,
    placement: Arc<Placement>,
    members_known: usize,
    published: String,
}

async fn run(env: HostEnv) {
    let mut rec = Reconciler::new(&env.node.name, reconcile_config(&env.config));
    let mut shell = Shell::default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tick = Duration::from_millis(env.config.reconcile_interval_ms);
    loop {
        tokio::time::sleep(tick).await;
        if env.paused.load(Ordering::Relaxed) {
            continue;
        }
        let now = (env.clock)();
        while let Ok(Feedback::StartFailed(r, e)) = rx.try_recv() {
            rec.handle_start_failed(&r, &e, now);
        }
        for (w, p) in env.profiles.lock().expect("profiles").iter() {
            env.mem.set_profile(w, mem_profile(p));
        }
        let (peers, input) = build_input(&env, &mut shell).await;
        let actions = rec.handle_tick(&input, now);
        rec.check_invariants();
        for action in actions {
            execute(&env, action, &tx);
        }
        for target in rec.probe_targets() {
            let (handle, check) = (target.handle, target.check);
            let timeout = Duration::from_millis(check.timeout_ms);
            let outcome = env.mem.probe(&handle, &check.probe, timeout).await;
            let (ok, detail) = match outcome {
                ProbeOutcome::Healthy => (true, String::new()),
                ProbeOutcome::Unhealthy { reason } => (false, reason),
            };
            rec.handle_probe_result(&handle, ok, &detail, now);
        }
        drop(peers);
        let text = serde_json::to_string(&rec.observed()).unwrap_or_default();
        if text != shell.published {
            let chitchat = env.node.gossip().chitchat();
            chitchat
                .lock()
                .await
                .self_node_state()
                .set(STATUS_KEY, &text);
            shell.published = text;
        }
    }
}

fn execute(env: &HostEnv, action: Action, tx: &mpsc::UnboundedSender<Feedback>) {
    let mem = env.mem.clone();
    match action {
        Action::Start {
            replica,
            spec,
            version,
            ..
        } => {
            let (tx, node) = (tx.clone(), env.node.name.clone());
            tokio::spawn(async move {
                let req = StartRequest {
                    replica: replica.clone(),
                    spec,
                    spec_version: version,
                    node,
                };
                if let Err(e) = mem.start(req).await {
                    let _ = tx.send(Feedback::StartFailed(replica, e.to_string()));
                }
            });
        }
        Action::Stop {
            handle, grace_ms, ..
        } => {
            tokio::spawn(async move {
                let _ = mem.stop(&handle, Duration::from_millis(grace_ms)).await;
            });
        }
        Action::Remove { handle, .. } => {
            tokio::spawn(async move {
                let _ = mem.remove(&handle).await;
            });
        }
        Action::Reload { .. } => {}
    }
}

async fn build_input(env: &HostEnv, sh: &mut Shell) -> (Vec<Peer>, ReconcileInput) {
    let (peers, dead, peer_status) = {
        let chitchat = env.node.gossip().chitchat();
        let guard = chitchat.lock().await;
        let peers = sh.view.read(&guard);
        let dead: BTreeSet<String> = guard
            .dead_nodes()
            .map(|id| id.node_id.to_string())
            .collect();
        let mut status: BTreeMap<String, Vec<InstanceStatus>> = BTreeMap::new();
        // Only a name's newest incarnation speaks for it: a restarted host has not published
        // yet, and its previous incarnation's report (instances that died with it) must not
        // stand in for it.
        let mut newest: BTreeMap<&str, &ChitchatId> = BTreeMap::new();
        for id in guard.node_states().keys() {
            let e = newest.entry(&*id.node_id).or_insert(id);
            if id.generation_id > e.generation_id {
                *e = id;
            }
        }
        for (id, state) in guard.node_states() {
            if newest.get(&*id.node_id) != Some(&id) {
                continue;
            }
            let Some(v) = state.get_versioned(STATUS_KEY) else {
                continue;
            };
            let entry = sh
                .statuses
                .entry(id.clone())
                .or_insert((u64::MAX, Vec::new()));
            if entry.0 != v.version {
                *entry = (
                    v.version,
                    serde_json::from_str(&v.value).unwrap_or_default(),
                );
            }
            status.insert(id.node_id.to_string(), entry.1.clone());
        }
        (peers, dead, status)
    };
    refresh_specs(env, sh).await;
    let key = placement_key(&peers, &sh.specs);
    if key != sh.placement_key {
        let nodes: Vec<_> = peers
            .iter()
            .filter_map(|p| {
                p.record.as_ref().map(|r| {
                    let mut node = r.placement_node(&p.name);
                    node.down = !p.alive;
                    node
                })
            })
            .collect();
        let workloads: Vec<_> = sh
            .specs
            .values()
            .map(|e| placement_workload(&e.spec))
            .collect();
        sh.placement = Arc::new(place(&nodes, &workloads));
        sh.placement_key = key;
    }
    sh.members_known = sh.members_known.max(peers.len());
    let live: BTreeSet<String> = peers
        .iter()
        .filter(|p| p.alive)
        .map(|p| p.name.clone())
        .collect();
    let me = &env.node.name;
    let own = peers
        .iter()
        .find(|p| &p.name == me)
        .and_then(|p| p.record.as_ref());
    let draining = own.is_some_and(|r| r.draining);
    let capacity = own.map(|r| shoal_core::Resources::new(r.cpu_millis, r.memory_bytes));
    let input = ReconcileInput {
        specs: sh.specs.clone(),
        owners: sh.placement.assigned.clone(),
        instances: env.mem.list().await.unwrap_or_default(),
        runtime_unavailable: None,
        supports_containers: true,
        supports_processes: true,
        peers: peer_status,
        membership: Membership {
            unreachable: peers
                .iter()
                .filter(|p| !p.alive && !dead.contains(&p.name))
                .map(|p| p.name.clone())
                .collect(),
            live,
            dead,
            members_known: sh.members_known,
        },
        draining,
        capacity,
        view_suspect: None,
    };
    (peers, input)
}

async fn refresh_specs(env: &HostEnv, sh: &mut Shell) {
    let who = PeerName("host".into());
    let Response::Digest(d) = env
        .node
        .clone()
        .handle_request(Request::Digest, who.clone())
        .await
    else {
        return;
    };
    if d == sh.digest {
        return;
    }
    if let Response::Workloads(list) = env
        .node
        .clone()
        .handle_request(Request::Get { name: None }, who)
        .await
    {
        sh.specs = list
            .into_iter()
            .map(|w| {
                (
                    w.name,
                    SpecEntry {
                        version: w.version,
                        spec: Arc::new(w.spec),
                    },
                )
            })
            .collect();
        sh.digest = d;
    }
}

fn placement_key(peers: &[Peer], specs: &BTreeMap<String, SpecEntry>) -> u64 {
    use std::hash::Hasher;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for p in peers {
        if let Some(r) = &p.record {
            h.write(p.name.as_bytes());
            h.write_u8(u8::from(p.alive));
            h.write_u64(r.cpu_millis);
            h.write_u64(r.memory_bytes);
            h.write(r.zone.as_bytes());
            h.write_u8(u8::from(r.draining));
        }
    }
    for (name, e) in specs {
        h.write(name.as_bytes());
        h.write(e.version.as_bytes());
    }
    h.finish()
}
