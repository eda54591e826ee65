//! A pure test cluster for the reconciler: agents with a fake runtime each, gossip by copying
//! `observed()` between reachable agents, a failure detector that confirms an unreachable node
//! dead after `dead_after_ms`, partitions, host deaths, agent restarts, and probes fed on every
//! step. Time advances in steps of `STEP_MS`; nothing here reads a clock.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shoal_core::instance::{Phase, ReplicaId, RuntimeInstance};
use shoal_core::reconcile::{
    Action, InstanceStatus, Issue, IssueKind, Membership, ReconcileConfig, ReconcileInput,
    Reconciler, SpecEntry, StopCause,
};
use shoal_core::spec::WorkloadSpec;
use shoal_core::Resources;

/// Simulated time per step.
pub const STEP_MS: u64 = 500;
/// Simulated epoch start (ms): far from 0 so that "since" arithmetic is realistic.
pub const T0: u64 = 1_800_000_000_000;

/// A process spec with `extra` TOML appended.
pub fn spec(name: &str, replicas: u32, extra: &str) -> Arc<WorkloadSpec> {
    let text = format!(
        "name = \"{name}\"\nreplicas = {replicas}\n\n[process]\ncommand = [\"sleep\", \"3600\"]\n\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n{extra}"
    );
    Arc::new(WorkloadSpec::from_toml_str(&text, "test.toml").expect("test spec is valid"))
}

/// A container spec.
pub fn container_spec(name: &str, replicas: u32) -> Arc<WorkloadSpec> {
    let text = format!(
        "name = \"{name}\"\nreplicas = {replicas}\n\n[container]\nimage = \"busybox:1\"\n\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    Arc::new(WorkloadSpec::from_toml_str(&text, "test.toml").expect("test spec is valid"))
}

/// A runtime that starts, stops and crashes instances on command, deterministically.
#[derive(Clone, Debug, Default)]
pub struct FakeRuntime {
    pub instances: BTreeMap<String, RuntimeInstance>,
    next_id: u64,
    /// Starting -> Running after this long.
    pub start_ms: u64,
    /// Stopping -> Exited after this long.
    pub stop_ms: u64,
    stopping: BTreeMap<String, u64>,
    /// Workloads whose starts fail (image missing).
    pub failing: BTreeSet<String>,
    /// Handles whose probe fails.
    pub unhealthy: BTreeSet<String>,
    /// Whether reload hooks succeed.
    pub reload_fails: bool,
    prefix: String,
}

impl FakeRuntime {
    pub fn new(prefix: &str) -> Self {
        FakeRuntime {
            start_ms: 1_000,
            stop_ms: 1_000,
            prefix: prefix.to_string(),
            ..Self::default()
        }
    }

    /// Executes one action at `now`.
    pub fn apply(&mut self, action: &Action, now: u64) {
        match action {
            Action::Start {
                replica,
                version,
                fence_token,
                ..
            } => {
                self.next_id += 1;
                let handle = format!("{}-{}", self.prefix, self.next_id);
                let failed = self.failing.contains(&replica.workload);
                let inst = RuntimeInstance {
                    handle: handle.clone(),
                    replica: replica.clone(),
                    spec_version: version.clone(),
                    phase: if failed {
                        Phase::Failed
                    } else {
                        Phase::Starting
                    },
                    started_at_ms: now,
                    exited_at_ms: failed.then_some(now),
                    exit_code: None,
                    error: failed.then(|| "image busybox:1 not found".to_string()),
                    fence_token: *fence_token,
                    ports: Default::default(),
                };
                self.instances.insert(handle, inst);
            }
            Action::Stop { handle, .. } => {
                if let Some(i) = self.instances.get_mut(handle) {
                    if i.phase.may_be_alive() {
                        i.phase = Phase::Stopping;
                        self.stopping
                            .entry(handle.clone())
                            .or_insert(now + self.stop_ms);
                    }
                }
            }
            Action::Remove { handle, .. } => {
                self.instances.remove(handle);
                self.stopping.remove(handle);
            }
            Action::Reload { .. } => {}
        }
    }

    /// Moves instances along: starting ones run, stopping ones exit.
    pub fn advance(&mut self, now: u64) {
        for i in self.instances.values_mut() {
            if i.phase == Phase::Starting && now >= i.started_at_ms + self.start_ms {
                i.phase = Phase::Running;
            }
        }
        let done: Vec<String> = self
            .stopping
            .iter()
            .filter(|(_, &at)| now >= at)
            .map(|(h, _)| h.clone())
            .collect();
        for h in done {
            self.stopping.remove(&h);
            if let Some(i) = self.instances.get_mut(&h) {
                i.phase = Phase::Exited;
                i.exited_at_ms = Some(now);
                i.exit_code = Some(143);
            }
        }
    }

    /// The instance exits by itself with `code`.
    pub fn crash(&mut self, handle: &str, code: i32, now: u64) {
        let i = self
            .instances
            .get_mut(handle)
            .expect("crash of a known instance");
        i.phase = Phase::Exited;
        i.exited_at_ms = Some(now);
        i.exit_code = Some(code);
        self.stopping.remove(handle);
    }

    /// Alive instances of a replica.
    pub fn alive(&self, replica: &ReplicaId) -> Vec<&RuntimeInstance> {
        self.instances
            .values()
            .filter(|i| &i.replica == replica && i.phase.may_be_alive())
            .collect()
    }
}

/// One agent: its reconciler, its runtime, and what it last heard from each peer.
pub struct Agent {
    pub rec: Reconciler,
    pub rt: FakeRuntime,
    /// The agent process runs (false: crashed or its host died).
    pub up: bool,
    pub heard: BTreeMap<String, Vec<InstanceStatus>>,
    pub draining: bool,
    /// The node's declared capacity (None: no limit).
    pub capacity: Option<Resources>,
    pub view_suspect: Option<String>,
    pub supports_containers: bool,
    /// Why the shell's guard is unavailable (exclusive replicas are then not started).
    pub guard_unavailable: Option<String>,
    /// What the shell's name-claim rule says this agent holds (`shoal_core::claims`).
    pub name_hold: shoal_core::claims::SelfHold,
    /// What it gossips: `observed()` after its last round (nothing before its first).
    pub published: Option<Vec<InstanceStatus>>,
    /// Replicas it runs that the cell level moved to another cell, as its shell reports them.
    pub moved_to_cells: BTreeMap<ReplicaId, shoal_core::reconcile::CellHandoff>,
    /// Its cell's quorum of cells, as its shell computes it (None: a mesh of one cell).
    pub cell_quorum: Option<shoal_core::reconcile::CellQuorum>,
    /// What the other cells said of its exclusive replicas.
    pub cell_copies: BTreeMap<ReplicaId, shoal_core::reconcile::CellCopies>,
    /// The starts whose image its runtime reports pulling.
    pub pulling: BTreeMap<ReplicaId, shoal_core::instance::PullProgress>,
    /// Since when each other node has been unreachable from here.
    unreachable_since: BTreeMap<String, u64>,
}

/// A cluster of agents sharing specs and one placement owner map.
pub struct Cluster {
    pub now: u64,
    pub config: ReconcileConfig,
    pub agents: BTreeMap<String, Agent>,
    pub specs: BTreeMap<String, SpecEntry>,
    pub owners: BTreeMap<ReplicaId, String>,
    /// Workloads with a tombstone (deleted on purpose).
    pub deleted: BTreeSet<String>,
    /// A node's own placement when it differs from `owners` (a partitioned view).
    pub owners_of: BTreeMap<String, BTreeMap<ReplicaId, String>>,
    /// Pairs of nodes that cannot reach each other.
    pub cut: BTreeSet<(String, String)>,
    /// How long a node stays unreachable before the detector confirms it dead.
    pub dead_after_ms: u64,
    /// Extra gossip entries of nodes that are not simulated (they are live unless listed dead).
    pub fake_peers: BTreeMap<String, Vec<InstanceStatus>>,
    /// Nodes whose gossip arrives but which answer no round trip (a dead member's state relayed
    /// by others looks so).
    pub silent: BTreeSet<String>,
    /// Every action: (time, node, action).
    pub log: Vec<(u64, String, Action)>,
    /// Probes fed on every step.
    pub auto_probe: bool,
    /// Reverse the runtime list before each tick (to test order independence).
    pub shuffle_lists: bool,
    /// The least fencing token handed to every agent (0: none).
    pub fence_token_floor: u64,
    /// Hand every agent the current time as its floor instead, as the agent does.
    pub fence_token_floor_is_now: bool,
    /// Agents whose gossip knows no other member (restarted while cut off: their seeds are
    /// unreachable): they see themselves alone, one known member, no peer state.
    pub knows_only_itself: BTreeSet<String>,
    /// The node that holds each replica's data, handed to every agent.
    pub data_holders: BTreeMap<ReplicaId, String>,
    /// Per node: the replicas whose data it no longer holds, with why.
    pub data_missing: BTreeMap<String, BTreeMap<ReplicaId, String>>,
    /// Nodes whose earlier identity every agent's failure detector still holds dead, in the dead
    /// set beside the live name: chitchat keeps a restarted agent's previous identity dead for
    /// an hour, and the shell once fed it so.
    pub earlier_identity_dead: BTreeSet<String>,
}

impl Cluster {
    pub fn new(nodes: &[&str]) -> Cluster {
        Self::with_config(nodes, ReconcileConfig::default())
    }

    pub fn with_config(nodes: &[&str], config: ReconcileConfig) -> Cluster {
        let mut c = Cluster {
            now: T0,
            config,
            agents: BTreeMap::new(),
            specs: BTreeMap::new(),
            owners: BTreeMap::new(),
            deleted: BTreeSet::new(),
            owners_of: BTreeMap::new(),
            cut: BTreeSet::new(),
            dead_after_ms: 3_000,
            fake_peers: BTreeMap::new(),
            silent: BTreeSet::new(),
            log: Vec::new(),
            auto_probe: true,
            shuffle_lists: false,
            fence_token_floor: 0,
            fence_token_floor_is_now: false,
            knows_only_itself: BTreeSet::new(),
            data_holders: BTreeMap::new(),
            data_missing: BTreeMap::new(),
            earlier_identity_dead: BTreeSet::new(),
        };
        for n in nodes {
            let agent = Agent {
                rec: Reconciler::new(n, c.config.clone()),
                rt: FakeRuntime::new(n),
                up: true,
                heard: BTreeMap::new(),
                draining: false,
                capacity: None,
                view_suspect: None,
                supports_containers: true,
                guard_unavailable: None,
                name_hold: Default::default(),
                published: None,
                moved_to_cells: BTreeMap::new(),
                cell_quorum: None,
                cell_copies: BTreeMap::new(),
                pulling: BTreeMap::new(),
                unreachable_since: BTreeMap::new(),
            };
            c.agents.insert(n.to_string(), agent);
        }
        c
    }

    pub fn put(&mut self, spec: Arc<WorkloadSpec>, version: &str) {
        let entry = SpecEntry {
            version: version.to_string(),
            spec,
            paused: false,
        };
        self.specs.insert(entry.spec.name.clone(), entry);
    }

    /// Pauses (or resumes) the rollout of `workload`, as `shoal rollout pause` does.
    pub fn pause(&mut self, workload: &str, paused: bool) {
        self.specs.get_mut(workload).expect("a spec").paused = paused;
    }

    pub fn place(&mut self, workload: &str, replica: u32, node: &str) {
        self.owners
            .insert(ReplicaId::new(workload, replica), node.to_string());
    }

    pub fn agent(&self, node: &str) -> &Agent {
        &self.agents[node]
    }

    pub fn agent_mut(&mut self, node: &str) -> &mut Agent {
        self.agents.get_mut(node).expect("known node")
    }

    /// Whether `a`'s failure detector holds `b` live: `b` is up and its packets reach `a`.
    fn reachable(&self, a: &str, b: &str) -> bool {
        a == b
            || (self.agents.get(b).is_none_or(|x| x.up)
                && !self.cut.contains(&(b.to_string(), a.to_string())))
    }

    /// Whether a round trip from `a` to `b` would come back saying `b` holds `a` live.
    fn hears(&self, b: &str, a: &str) -> bool {
        a != b
            && !self.silent.contains(b)
            && self.agents.get(b).is_none_or(|x| x.up)
            && !self.cut.contains(&(a.to_string(), b.to_string()))
            && !self.cut.contains(&(b.to_string(), a.to_string()))
    }

    /// Loses every packet from `from` to each of `to` (the other direction still works).
    pub fn one_way(&mut self, from: &str, to: &[&str]) {
        for b in to {
            self.cut.insert((from.to_string(), b.to_string()));
        }
    }

    /// Cuts every link between the two groups, both ways.
    pub fn partition(&mut self, left: &[&str], right: &[&str]) {
        for a in left {
            for b in right {
                self.cut.insert((a.to_string(), b.to_string()));
                self.cut.insert((b.to_string(), a.to_string()));
            }
        }
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Builds `node`'s input for this step (and updates its failure detector and gossip).
    pub fn input_of(&mut self, node: &str) -> ReconcileInput {
        let names: Vec<String> = self.agents.keys().cloned().collect();
        let reach: BTreeMap<String, bool> = names
            .iter()
            .map(|n| (n.clone(), self.reachable(node, n)))
            .collect();
        let published: BTreeMap<String, Vec<InstanceStatus>> = self
            .agents
            .iter()
            .filter(|(_, a)| a.up)
            .filter_map(|(n, a)| Some((n.clone(), a.published.clone()?)))
            .collect();
        let now = self.now;
        let dead_after = self.dead_after_ms;
        let mut membership = Membership::default();
        for n in &names {
            if self.hears(n, node) {
                membership.heard_at.insert(n.clone(), now);
            }
        }
        let agent = self.agents.get_mut(node).expect("known node");
        for n in &names {
            if reach[n] {
                agent.unreachable_since.remove(n);
                membership.live.insert(n.clone());
                if let Some(p) = published.get(n) {
                    if n != node {
                        agent.heard.insert(n.clone(), p.clone());
                    }
                }
            } else {
                let since = *agent.unreachable_since.entry(n.clone()).or_insert(now);
                if now >= since.saturating_add(dead_after) {
                    membership.dead.insert(n.clone());
                } else {
                    membership.unreachable.insert(n.clone());
                }
            }
        }
        membership
            .dead
            .extend(self.earlier_identity_dead.iter().cloned());
        let mut peers = agent.heard.clone();
        for (n, statuses) in &self.fake_peers {
            peers.insert(n.clone(), statuses.clone());
            membership.live.insert(n.clone());
            membership.heard_at.insert(n.clone(), now);
        }
        membership.members_known = names.len() + self.fake_peers.len();
        if self.knows_only_itself.contains(node) {
            membership = Membership {
                live: [node.to_string()].into(),
                members_known: 1,
                ..Membership::default()
            };
            peers.clear();
        }
        membership.cells = agent.cell_quorum.clone();
        let mut instances: Vec<RuntimeInstance> = agent.rt.instances.values().cloned().collect();
        if self.shuffle_lists {
            instances.reverse();
        }
        ReconcileInput {
            specs: self.specs.clone(),
            owners: self.owners_of.get(node).unwrap_or(&self.owners).clone(),
            instances,
            runtime_unavailable: None,
            exclusive_guard_unavailable: agent.guard_unavailable.clone(),
            name_hold: agent.name_hold.clone(),
            moved_to_cells: agent.moved_to_cells.clone(),
            cell_copies: agent.cell_copies.clone(),
            supports_containers: agent.supports_containers,
            supports_processes: true,
            peers,
            pulling: agent.pulling.clone(),
            membership,
            draining: agent.draining,
            capacity: agent.capacity,
            view_suspect: agent.view_suspect.clone(),
            fence_token_floor: match self.fence_token_floor_is_now {
                true => now,
                false => self.fence_token_floor,
            },
            volume_roots: Vec::new(),
            deleted: self.deleted.clone(),
            data_holders: self.data_holders.clone(),
            data_missing: self.data_missing.get(node).cloned().unwrap_or_default(),
            past_specs: BTreeMap::new(),
        }
    }

    /// One tick of one agent at the current time; returns its actions (also logged and applied).
    pub fn tick(&mut self, node: &str) -> Vec<Action> {
        let input = self.input_of(node);
        let now = self.now;
        let cap = self.config.actions_per_round_max;
        let agent = self.agents.get_mut(node).expect("known node");
        let actions = agent.rec.handle_tick(&input, now);
        assert!(
            actions.len() <= cap,
            "{} actions > cap {cap}",
            actions.len()
        );
        check_starts(node, &input, &agent.rt, &actions);
        agent.rec.check_invariants();
        agent.published = Some(agent.rec.observed());
        for a in &actions {
            agent.rt.apply(a, now);
            if let Action::Reload { handle, .. } = a {
                let ok = !agent.rt.reload_fails;
                agent
                    .rec
                    .handle_reload_result(handle, ok, "hook exited 1", now);
            }
            self.log.push((now, node.to_string(), a.clone()));
        }
        actions
    }

    /// Ticks every up agent once at the current time.
    pub fn tick_all(&mut self) {
        let names: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, a)| a.up)
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            self.tick(&n);
        }
    }

    /// Advances one step: runtimes move, probes run, every up agent ticks.
    pub fn step(&mut self) {
        self.now += STEP_MS;
        let now = self.now;
        for agent in self.agents.values_mut() {
            agent.rt.advance(now);
            if agent.up && self.auto_probe {
                for target in agent.rec.probe_targets() {
                    let handle = target.handle;
                    let running = agent
                        .rt
                        .instances
                        .get(&handle)
                        .is_some_and(|i| i.phase == Phase::Running);
                    if running {
                        let ok = !agent.rt.unhealthy.contains(&handle);
                        agent
                            .rec
                            .handle_probe_result(&handle, ok, "connection refused", now);
                    }
                }
            }
        }
        self.tick_all();
    }

    /// Steps for `ms`, calling `check` after every step.
    pub fn run_for_checked(&mut self, ms: u64, mut check: impl FnMut(&Cluster)) {
        let end = self.now + ms;
        while self.now < end {
            self.step();
            check(self);
        }
    }

    pub fn run_for(&mut self, ms: u64) {
        self.run_for_checked(ms, |_| {});
    }

    /// The host of `node` dies: the agent and every instance on it.
    pub fn kill_host(&mut self, node: &str) {
        let agent = self.agent_mut(node);
        agent.up = false;
        agent.rt.instances.clear();
    }

    /// The agent of `node` restarts with a fresh reconciler; its instances survive (adoption).
    pub fn restart_agent(&mut self, node: &str) {
        let config = self.config.clone();
        // A restarted agent is a new gossip generation: peers drop what it published before.
        for other in self.agents.values_mut() {
            other.heard.remove(node);
        }
        let agent = self.agent_mut(node);
        let last_majority = agent.rec.last_majority_ms();
        let members = agent.rec.members_known_at_majority();
        agent.rec = Reconciler::new(node, config);
        agent.published = None;
        // The shell persists both.
        if let Some(at) = last_majority {
            agent.rec.restore_last_majority(at);
        }
        if let Some(members) = members {
            agent.rec.restore_members_known(members);
        }
        agent.up = true;
    }

    /// Alive instances of a replica across the cluster: (node, handle, version).
    pub fn alive_copies(&self, workload: &str, replica: u32) -> Vec<(String, String, String)> {
        let r = ReplicaId::new(workload, replica);
        let mut out = Vec::new();
        for (n, a) in &self.agents {
            for i in a.rt.alive(&r) {
                out.push((n.clone(), i.handle.clone(), i.spec_version.clone()));
            }
        }
        out
    }

    /// Replicas of a workload with a running copy that its agent reports healthy.
    pub fn serving(&self, workload: &str) -> usize {
        let replicas = self.specs.get(workload).map_or(0, |e| e.spec.replicas);
        (0..replicas)
            .filter(|&r| {
                let id = ReplicaId::new(workload, r);
                self.agents.values().filter(|a| a.up).any(|a| {
                    a.rec
                        .observed()
                        .iter()
                        .any(|s| s.replica == id && s.serves())
                        && a.rt.alive(&id).iter().any(|i| i.phase == Phase::Running)
                })
            })
            .count()
    }

    /// The fencing tokens of the `Start` actions for a replica, in order: (node, token).
    pub fn start_tokens(&self, workload: &str, replica: u32) -> Vec<(String, Option<u64>)> {
        let r = ReplicaId::new(workload, replica);
        self.log
            .iter()
            .filter_map(|(_, n, a)| match a {
                Action::Start {
                    replica,
                    fence_token,
                    ..
                } if *replica == r => Some((n.clone(), *fence_token)),
                _ => None,
            })
            .collect()
    }

    /// Times of the `Start` actions for a replica.
    pub fn starts(&self, workload: &str, replica: u32) -> Vec<u64> {
        let r = ReplicaId::new(workload, replica);
        self.log
            .iter()
            .filter(|(_, _, a)| matches!(a, Action::Start { replica, .. } if *replica == r))
            .map(|(t, _, _)| *t)
            .collect()
    }

    /// When `node` first sent a stop with `cause`, if it did.
    pub fn first_stop(&self, node: &str, cause: StopCause) -> Option<u64> {
        self.log
            .iter()
            .find(|(_, n, a)| {
                n == node && matches!(a, Action::Stop { cause: c, .. } if *c == cause)
            })
            .map(|(t, _, _)| *t)
    }

    /// The actions of a kind logged for a node.
    pub fn count(&self, node: &str, pred: impl Fn(&Action) -> bool) -> usize {
        self.log
            .iter()
            .filter(|(_, n, a)| n == node && pred(a))
            .count()
    }

    /// The first current issue of this kind on `node`.
    pub fn issue(&self, node: &str, kind: IssueKind) -> Option<Issue> {
        self.agent(node)
            .rec
            .issues()
            .into_iter()
            .find(|i| i.kind == kind)
    }

    /// The one alive instance of a replica on `node` exits by itself with `code`.
    pub fn crash(&mut self, node: &str, workload: &str, replica: u32, code: i32) {
        let handle = self.handle(node, workload, replica);
        let now = self.now;
        self.agent_mut(node).rt.crash(&handle, code, now);
    }

    /// The one alive handle of a replica on a node.
    pub fn handle(&self, node: &str, workload: &str, replica: u32) -> String {
        let alive = self
            .agent(node)
            .rt
            .alive(&ReplicaId::new(workload, replica));
        assert_eq!(
            alive.len(),
            1,
            "expected one alive instance of {workload}/{replica} on {node}"
        );
        alive[0].handle.clone()
    }
}

/// A gossiped status, for fake peers.
pub fn peer_status(
    workload: &str,
    replica: u32,
    phase: Phase,
    healthy: bool,
    version: &str,
) -> InstanceStatus {
    InstanceStatus {
        replica: ReplicaId::new(workload, replica),
        handle: Some(format!("peer-{workload}-{replica}")),
        phase,
        healthy,
        restarts: 0,
        spec_version: version.to_string(),
        since_ms: 0,
        exit_code: None,
        last_error: None,
        fence_token: None,
        failures: 0,
        ports: Default::default(),
        pull: None,
        waits_for_data: false,
    }
}

/// Invariants of one round's starts: one start per replica per round; no start while an instance
/// of the replica is alive here (except the surge copy of a rolling update); no exclusive start
/// while a live peer reports a copy that may be alive.
pub fn check_starts(node: &str, input: &ReconcileInput, rt: &FakeRuntime, actions: &[Action]) {
    let mut started = BTreeSet::new();
    for a in actions {
        let Action::Start {
            replica,
            version,
            spec,
            ..
        } = a
        else {
            continue;
        };
        assert!(
            started.insert(replica.clone()),
            "{node}: two starts of {replica} in one round"
        );
        let alive = rt.alive(replica);
        let surge = !spec.placement.exclusive
            && spec.update.max_surge > 0
            && alive.iter().all(|i| &i.spec_version != version);
        assert!(
            alive.is_empty() || surge,
            "{node}: start of {replica} while {alive:?} is alive"
        );
        if spec.placement.exclusive {
            for (peer, statuses) in input.peers.iter().filter(|(p, _)| *p != node) {
                let live = input.membership.live.contains(peer);
                let copy = statuses
                    .iter()
                    .any(|s| &s.replica == replica && s.may_be_alive());
                assert!(
                    !(live && copy),
                    "{node}: exclusive start of {replica} while live {peer} reports a copy"
                );
            }
        }
    }
}
