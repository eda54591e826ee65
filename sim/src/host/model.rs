//! [`ModelHost`]: the simulator's model of the host loop (see the module above for its rules).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use shoal::mesh::api::{Request, Response};
use shoal::mesh::view::placement_workload;
use shoal::tls::PeerName;
use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::placement::{place, Placement};
use shoal_core::reconcile::backoff_delay_ms;
use shoal_core::spec::{RestartMode, WorkloadSpec};

use super::view::{encode_reports, Peer, Report, ViewCache, OBSERVED_KEY};
use super::{HostEnv, HostLoop};
use crate::runtime::StartRequest;

/// The modelled host loop.
pub struct ModelHost;

impl HostLoop for ModelHost {
    fn spawn(&self, env: HostEnv) -> tokio::task::JoinHandle<()> {
        tokio::spawn(run(env))
    }

    fn name(&self) -> &'static str {
        "model"
    }
}

#[derive(Default)]
struct State {
    view: ViewCache,
    digest: Vec<u8>,
    specs: Vec<(WorkloadSpec, String)>,
    placement_key: u64,
    placement: Arc<Placement>,
    dead_since: HashMap<String, u64>,
    majority_lost_since: Option<u64>,
    orphan_since: BTreeMap<ReplicaId, u64>,
    /// Consecutive failures and the earliest next start.
    backoff: BTreeMap<ReplicaId, (u32, u64)>,
    published: String,
}

async fn run(env: HostEnv) {
    let mut state = State::default();
    let interval = std::time::Duration::from_millis(env.config.reconcile_interval_ms);
    loop {
        tokio::time::sleep(interval).await;
        if env.paused.load(Ordering::Relaxed) {
            continue;
        }
        round(&env, &mut state).await;
    }
}

async fn refresh_specs(env: &HostEnv, state: &mut State) {
    let who = PeerName("host".into());
    if let Response::Digest(d) = env
        .node
        .clone()
        .handle_request(Request::Digest, who.clone())
        .await
    {
        if d == state.digest {
            return;
        }
        if let Response::Workloads(list) = env
            .node
            .clone()
            .handle_request(Request::Get { name: None }, who)
            .await
        {
            state.specs = list.into_iter().map(|w| (w.spec, w.version)).collect();
            state.digest = d;
        }
    }
}

fn placement_key(peers: &[Peer], specs: &[(WorkloadSpec, String)]) -> u64 {
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
    for (s, v) in specs {
        h.write(s.name.as_bytes());
        h.write(v.as_bytes());
    }
    h.finish()
}

async fn round(env: &HostEnv, st: &mut State) {
    let now = env.now_ms();
    let peers = {
        let chitchat = env.node.gossip().chitchat();
        let guard = chitchat.lock().await;
        st.view.read(&guard)
    };
    refresh_specs(env, st).await;
    let key = placement_key(&peers, &st.specs);
    if key != st.placement_key {
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
        let workloads: Vec<_> = st
            .specs
            .iter()
            .map(|(s, _)| placement_workload(s))
            .collect();
        st.placement = Arc::new(place(&nodes, &workloads));
        st.placement_key = key;
    }
    let text = converge(env, st, &peers, now);
    if text != st.published {
        let chitchat = env.node.gossip().chitchat();
        chitchat
            .lock()
            .await
            .self_node_state()
            .set(OBSERVED_KEY, &text);
        st.published = text;
    }
}

/// One reconcile step over the runtime; returns the reports to gossip.
fn converge(env: &HostEnv, st: &mut State, peers: &[Peer], now: u64) -> String {
    let me = env.node.name.as_str();
    let alive = peers.iter().filter(|p| p.alive).count();
    let majority = alive * 2 > peers.len();
    for p in peers {
        if p.alive {
            st.dead_since.remove(&p.name);
        } else {
            st.dead_since.entry(p.name.clone()).or_insert(now);
        }
    }
    st.majority_lost_since = if majority {
        None
    } else {
        st.majority_lost_since.or(Some(now))
    };
    let fenced = st
        .majority_lost_since
        .is_some_and(|t| now - t >= env.config.fence_timeout_ms);
    let specs: BTreeMap<&str, &(WorkloadSpec, String)> =
        st.specs.iter().map(|s| (s.0.name.as_str(), s)).collect();
    let mine: BTreeMap<&ReplicaId, &(WorkloadSpec, String)> = st
        .placement
        .assigned
        .iter()
        .filter(|(_, n)| n.as_str() == me)
        .filter_map(|(r, _)| specs.get(r.workload.as_str()).map(|s| (r, *s)))
        .collect();
    let mut others: BTreeMap<&ReplicaId, Vec<(&Peer, char)>> = BTreeMap::new();
    for p in peers.iter().filter(|p| p.name != me) {
        for (r, phase) in &p.reports {
            others.entry(r).or_default().push((p, *phase));
        }
    }
    let profiles = env.profiles.lock().expect("profiles").clone();
    let mut rt = env.runtime.lock().expect("runtime");
    rt.advance(now);
    let here: Vec<(ReplicaId, Phase, String, bool, u64)> = rt
        .instances()
        .values()
        .map(|i| {
            (
                i.replica.clone(),
                i.phase,
                i.spec_version.clone(),
                i.exclusive,
                i.ready_ms,
            )
        })
        .collect();
    // Fencing, orphans, stale versions.
    for (r, phase, version, exclusive, ready_ms) in &here {
        if !phase.may_be_alive() || *phase == Phase::Stopping {
            continue;
        }
        if *exclusive && fenced {
            rt.stop(r, now);
            continue;
        }
        match mine.get(r) {
            Some((_, v)) if v != version => rt.stop(r, now),
            Some(_) => {
                st.orphan_since.remove(r);
                let reset = specs
                    .get(r.workload.as_str())
                    .map_or(u64::MAX, |s| s.0.restart.backoff_reset_ms);
                if *phase == Phase::Running && now.saturating_sub(*ready_ms) >= reset {
                    st.backoff.remove(r);
                }
            }
            None => {
                let since = *st.orphan_since.entry(r.clone()).or_insert(now);
                let owner = st.placement.assigned.get(r);
                let owner_runs = others.get(r).is_some_and(|v| {
                    v.iter()
                        .any(|(p, ph)| p.alive && Some(&p.name) == owner && *ph == 'r')
                });
                let gone = !specs.contains_key(r.workload.as_str())
                    || owner.is_none() && !st.placement.unschedulable.contains_key(r);
                if *exclusive || gone || owner_runs || now - since >= env.config.handoff_max_ms {
                    rt.stop(r, now);
                    st.orphan_since.remove(r);
                }
            }
        }
    }
    st.orphan_since
        .retain(|r, _| here.iter().any(|h| &h.0 == r));
    // Starts.
    let capacity = peers
        .iter()
        .find(|p| p.name == me)
        .and_then(|p| p.record.as_ref())
        .map(|r| (r.cpu_millis, r.memory_bytes));
    for (r, (spec, version)) in &mine {
        let existing = rt.instances().get(*r).map(|i| i.phase);
        if existing.is_some_and(|p| p.may_be_alive()) {
            continue;
        }
        if matches!(existing, Some(Phase::Exited | Phase::Failed)) {
            if spec.restart.policy == RestartMode::Never {
                continue;
            }
            let (fails, next) = st.backoff.entry((*r).clone()).or_insert((0, 0));
            if *next == 0 {
                // As the reconciler: a crash restarts at once the first time, a failed start
                // always waits.
                let floor = if existing == Some(Phase::Failed) {
                    2
                } else {
                    1
                };
                *fails = fails.saturating_add(1).max(floor);
                *next = now + backoff_delay_ms(&spec.restart, *fails);
            }
            if now < *next {
                continue;
            }
            *next = 0;
        }
        if spec.placement.exclusive
            && !may_take_exclusive(env, st, r, &others, majority, fenced, now)
        {
            continue;
        }
        if let Some((cpu, mem)) = capacity {
            let used = rt.reserved();
            let req = spec.resources;
            if used.cpu_millis + req.cpu_millis > cpu || used.memory_bytes + req.memory_bytes > mem
            {
                continue;
            }
        }
        let profile = profiles.get(&spec.name).copied().unwrap_or_default();
        let req = StartRequest {
            replica: (*r).clone(),
            spec_version: version.clone(),
            request: spec.resources,
            exclusive: spec.placement.exclusive,
        };
        rt.start(req, &profile, now);
    }
    rt.advance(now);
    let reports: Vec<Report> = rt
        .instances()
        .values()
        .filter(|i| i.alive())
        .map(|i| {
            let c = match i.phase {
                Phase::Running => 'r',
                Phase::Stopping => 't',
                _ => 's',
            };
            (i.replica.clone(), c)
        })
        .collect();
    encode_reports(&reports)
}

/// Stop-before-start: no live peer reports a copy, this host sees a strict majority and is not
/// fenced, and every dead peer that last reported a copy has been dead longer than the fencing
/// delay (it fenced itself by then, if it is in fact alive behind a partition).
fn may_take_exclusive(
    env: &HostEnv,
    st: &State,
    r: &ReplicaId,
    others: &BTreeMap<&ReplicaId, Vec<(&Peer, char)>>,
    majority: bool,
    fenced: bool,
    now: u64,
) -> bool {
    if !majority || fenced {
        return false;
    }
    let Some(copies) = others.get(r) else {
        return true;
    };
    copies.iter().all(|(p, _)| {
        !p.alive
            && st
                .dead_since
                .get(&p.name)
                .is_some_and(|t| now - t >= env.config.fence_delay_ms)
    })
}
