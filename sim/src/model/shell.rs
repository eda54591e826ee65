//! The model's host shell around the real reconciler (`shoal_core::reconcile::Reconciler`, one
//! per host): when a host runs a round, how its actions are executed on its fake runtime, and
//! what it publishes. Modelled after the real-code tier's former thin shell (removed: the real
//! tier runs the agent's own host loop now) and the in-memory runtime it drives.
//!
//! A host runs a round when its view changes (a death at once; a join or a spec epoch at its next
//! round), when one of its instances starts, fails to start or exits, when a peer's report about
//! a replica that concerns it arrives, and at the reconciler's `poll_timeout`. Nothing ticks every
//! host every interval: a host with nothing new does not run.
//!
//! The runtime behaves as `MemRuntime`: a start is listed `running` after the workload's
//! `start_ms` (or fails then with probability `start_fail`); a stop exits the instance at once
//! (the grace is not waited: the simulated processes honour the polite signal); `remove` forgets
//! an exited instance; a reload succeeds; probes pass.

use std::collections::{BTreeMap, BTreeSet};

use rand::RngExt;
use shoal_core::instance::{Phase, ReplicaId, RuntimeInstance};
use shoal_core::reconcile::{Action, HealthChange, ReconcileConfig, Reconciler};

use super::input::{self, HostState, Mesh};
use super::run::{Ev, Model};
use super::views::ViewKey;

/// One host: its view, its reconciler and its runtime.
pub(super) struct Host {
    index: u32,
    name: String,
    /// Up (not crashed).
    pub up: bool,
    /// Bumped at every restart; events of an earlier incarnation are dropped.
    pub incarnation: u32,
    /// Its cell (`None` without cells).
    pub cell: Option<u32>,
    /// The hosts its view holds dead (of its own cell only, in a mesh of cells).
    pub dead: BTreeSet<u32>,
    /// The cells its view holds down, with when it learned each.
    pub down_cells: BTreeMap<u32, u64>,
    /// The generation of cell summaries it holds.
    pub summaries: usize,
    /// The spec epoch it holds.
    pub epoch: usize,
    rec: Reconciler,
    /// The runtime's instances, by handle.
    pub runtime: BTreeMap<String, RuntimeInstance>,
    handles_issued: u64,
    /// Replicas its last observed state mentioned.
    claims: Vec<ReplicaId>,
    /// When its next round is due, if one is queued.
    pub round_at: Option<u64>,
}

impl Host {
    /// A fresh host of `cell`, up, knowing nothing.
    pub fn new(index: u32, name: &str, cell: Option<u32>, config: ReconcileConfig) -> Host {
        Host {
            index,
            name: name.to_string(),
            up: true,
            incarnation: 0,
            cell,
            dead: BTreeSet::new(),
            down_cells: BTreeMap::new(),
            summaries: 0,
            epoch: 0,
            rec: Reconciler::new(name, config),
            runtime: BTreeMap::new(),
            handles_issued: 0,
            claims: Vec::new(),
            round_at: None,
        }
    }

    /// The host comes back after a crash: a new agent (a fresh reconciler), an empty runtime
    /// (its instances died with it), and the view it joins with (`view`'s dead hosts, down
    /// cells, summaries and epoch) at `now`.
    pub fn restart(&mut self, view: ViewKey, now: u64, config: ReconcileConfig) {
        *self = Host {
            incarnation: self.incarnation + 1,
            dead: view.dead.into_iter().collect(),
            down_cells: view.down_cells.into_iter().map(|c| (c, now)).collect(),
            summaries: view.summaries,
            epoch: view.epoch,
            handles_issued: self.handles_issued,
            ..Host::new(self.index, &self.name, self.cell, config)
        };
    }

    /// Its view.
    pub fn key(&self) -> ViewKey {
        ViewKey {
            cell: self.cell,
            dead: self.dead.iter().copied().collect(),
            down_cells: self.down_cells.keys().copied().collect(),
            summaries: self.summaries,
            epoch: self.epoch,
        }
    }
}

impl Model<'_> {
    /// Queues a round of host `h` at `at` unless one is queued earlier.
    pub fn request_round(&mut self, h: u32, at: u64) {
        let host = &mut self.hosts[h as usize];
        if !host.up || host.round_at.is_some_and(|t| t <= at) {
            return;
        }
        host.round_at = Some(at);
        let incarnation = host.incarnation;
        self.push(
            at,
            Ev::Round {
                host: h,
                incarnation,
            },
        );
    }

    /// A queued round fires; rounds superseded by an earlier one are dropped (that round asked
    /// for its own next wake-up).
    pub fn round_due(&mut self, now: u64, h: u32, incarnation: u32) {
        if !self.current(h, incarnation) || self.hosts[h as usize].round_at != Some(now) {
            return;
        }
        self.hosts[h as usize].round_at = None;
        self.round(now, h);
    }

    fn round(&mut self, now: u64, h: u32) {
        self.m.rounds += 1;
        let key = self.hosts[h as usize].key();
        let view = self.views.placement(&key);
        let host = &self.hosts[h as usize];
        let state = HostState {
            index: h,
            cell: host.cell,
            dead: &host.dead,
            down_cells: &host.down_cells,
            runtime: &host.runtime,
            claims: &host.claims,
        };
        let mesh = Mesh {
            names: &self.names,
            gossip: &self.gossip,
            capacity: self.capacity,
            views: &self.views,
            copies: &self.copies,
            cell_ask_ms: self.d.cell_ask_ms,
        };
        let epoch = &self.views.epochs[host.epoch];
        let (input, handoff_wake) = input::build(&state, &view, epoch, &mesh, now);
        let actions = self.hosts[h as usize].rec.handle_tick(&input, now);
        for action in actions {
            self.execute(now, h, action);
        }
        let rec = &mut self.hosts[h as usize].rec;
        let mut healthier = false;
        for target in rec.probe_targets() {
            let change = rec.handle_probe_result(&target.handle, true, "", now);
            healthier |= change == HealthChange::BecameHealthy;
        }
        if cfg!(debug_assertions) {
            rec.check_invariants();
        }
        let observed = rec.observed();
        let wake = match healthier {
            true => Some(now),
            false => rec.poll_timeout(),
        };
        let host = &mut self.hosts[h as usize];
        host.claims = observed.iter().map(|s| s.replica.clone()).collect();
        host.claims.dedup();
        let (incarnation, at) = (host.incarnation, now + self.d.report_ms);
        if self.gossip.publish(h, observed, at) {
            self.push(
                at,
                Ev::Report {
                    host: h,
                    incarnation,
                },
            );
        }
        if let Some(wake) = wake {
            // "Now" after a round cut short by the action bound: the agent's next round.
            let interval = self.sc.host.reconcile_interval_ms.max(1);
            let at = if wake > now || healthier {
                wake.max(now)
            } else {
                now + interval
            };
            self.request_round(h, at);
        }
        if let Some(at) = handoff_wake {
            self.request_round(h, at);
        }
    }

    fn execute(&mut self, now: u64, h: u32, action: Action) {
        let incarnation = self.hosts[h as usize].incarnation;
        match action {
            Action::Start {
                replica,
                spec,
                version,
                fence_token,
                ..
            } => {
                assert_eq!(
                    fence_token.is_some(),
                    spec.placement.exclusive,
                    "{replica}: a fencing token on exactly the exclusive starts"
                );
                self.m.starts += 1;
                self.m.acted(now);
                let profile = self
                    .profiles
                    .get(&replica.workload)
                    .copied()
                    .unwrap_or_default();
                let failed =
                    profile.start_fail > 0.0 && self.rng.random::<f64>() < profile.start_fail;
                let ev = Ev::Started {
                    host: h,
                    incarnation,
                    replica,
                    version,
                    failed,
                    fence_token,
                };
                self.push(now + profile.start_ms, ev);
            }
            Action::Stop { handle, .. } => {
                if self.exited(now, h, &handle, 128 + 15) {
                    self.m.stops += 1;
                    self.m.acted(now);
                }
            }
            Action::Remove { handle, .. } => {
                let runtime = &mut self.hosts[h as usize].runtime;
                if runtime
                    .get(&handle)
                    .is_some_and(|i| !i.phase.may_be_alive())
                {
                    runtime.remove(&handle);
                }
            }
            Action::Reload { handle, .. } => {
                self.hosts[h as usize]
                    .rec
                    .handle_reload_result(&handle, true, "", now);
            }
        }
    }

    /// A start's latency passed on host `h`.
    pub fn started(
        &mut self,
        now: u64,
        h: u32,
        replica: ReplicaId,
        version: String,
        failed: bool,
        fence_token: Option<u64>,
    ) {
        let host = &mut self.hosts[h as usize];
        if failed {
            host.rec
                .handle_start_failed(&replica, "injected start failure", now);
            self.request_round(h, now);
            return;
        }
        host.handles_issued += 1;
        let handle = format!(
            "{}-{}-{}",
            replica.workload, replica.replica, host.handles_issued
        );
        let instance = RuntimeInstance {
            handle: handle.clone(),
            replica: replica.clone(),
            spec_version: version,
            phase: Phase::Running,
            started_at_ms: now,
            exited_at_ms: None,
            exit_code: None,
            error: None,
            fence_token,
            ports: Default::default(),
        };
        host.runtime.insert(handle.clone(), instance);
        let incarnation = host.incarnation;
        let copies = self.copies.entry(replica.clone()).or_default();
        copies.insert(h, now);
        let alive = copies.len();
        self.m
            .copy_ready(&replica, now, alive, fence_token.is_some());
        let profile = self.profiles.get(&replica.workload).copied();
        if let Some(after) = profile.and_then(|p| p.crash_after_ms) {
            let ev = Ev::Exited {
                host: h,
                incarnation,
                handle,
            };
            self.push(now + after, ev);
        }
        self.request_round(h, now);
    }

    /// An instance of host `h` exits (stopped, or by itself); false if it was not alive.
    pub fn exited(&mut self, now: u64, h: u32, handle: &str, exit_code: i32) -> bool {
        let host = &mut self.hosts[h as usize];
        let Some(i) = host.runtime.get_mut(handle) else {
            return false;
        };
        if !i.phase.may_be_alive() {
            return false;
        }
        i.phase = Phase::Exited;
        i.exited_at_ms = Some(now);
        i.exit_code = Some(exit_code);
        let replica = i.replica.clone();
        let still = host
            .runtime
            .values()
            .any(|x| x.replica == replica && x.phase.may_be_alive());
        if !still {
            if let Some(c) = self.copies.get_mut(&replica) {
                c.remove(&h);
            }
        }
        self.request_round(h, now);
        true
    }

    /// Host `h`'s published state reached the others: every up host concerned by a replica whose
    /// status changed (its owner in a view some host holds, or a host that reported it) runs a
    /// round.
    pub fn report_arrived(&mut self, now: u64, h: u32) {
        let changed = self.gossip.deliver(h, now);
        let mut concerned: BTreeSet<u32> = BTreeSet::new();
        for r in &changed {
            concerned.extend(self.views.owners_in_use(r));
            concerned.extend(self.gossip.reporters(r));
        }
        concerned.remove(&h);
        for o in concerned {
            self.request_round(o, now);
        }
    }
}
