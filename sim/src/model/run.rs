//! The discrete-event loop of the model tier: a heap of events in time order (ties in the order
//! they were pushed), one seeded ChaCha generator, the faults of the scenario and the gossip
//! delays. The faults are in `faults.rs`, what a host does with what it learns in `shell.rs`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use rand::{RngExt, SeedableRng};
use shoal_core::instance::ReplicaId;
use shoal_core::placement::model::Node;
use shoal_core::spec::WorkloadSpec;
use shoal_core::Resources;

use super::faults::not_modelled;
use super::gossip::Gossip;
use super::metrics::Metrics;
use super::shell::Host;
use super::views::{ViewKey, Views};
use super::{Delays, ModelReport};
use crate::scenario::{Action, InstanceProfile, Scenario};

/// What happens at one instant.
#[derive(Debug)]
pub(super) enum Ev {
    /// The scenario's event of this index fires (its selector is resolved now).
    Fault(usize),
    Crash(u32),
    Restart(u32),
    /// An observer learns that `subject` (in incarnation `incarnation`) died or came back.
    Learn {
        observer: u32,
        subject: u32,
        incarnation: u32,
        alive: bool,
    },
    /// A host receives the spec epoch `epoch`.
    LearnSpecs {
        observer: u32,
        epoch: usize,
    },
    /// A host (of another cell) learns that `cell` went down or came back; news of an earlier
    /// change of the cell (`change`) is dropped.
    LearnCell {
        observer: u32,
        cell: u32,
        change: u32,
        down: bool,
    },
    /// A host receives the generation `generation` of the cells' summaries.
    LearnSummaries {
        observer: u32,
        generation: usize,
    },
    Apply(Vec<WorkloadSpec>),
    /// A host's reconcile round.
    Round {
        host: u32,
        incarnation: u32,
    },
    /// A start's latency passed: the instance runs, or the start failed.
    Started {
        host: u32,
        incarnation: u32,
        replica: ReplicaId,
        version: String,
        failed: bool,
        /// The start's fencing token: exactly the exclusive replicas have one.
        fence_token: Option<u64>,
    },
    /// An instance exits by itself (a crash loop).
    Exited {
        host: u32,
        incarnation: u32,
        handle: String,
    },
    /// A host's published observed state reaches the other hosts.
    Report {
        host: u32,
        incarnation: u32,
    },
}

/// An event with its time and push order: the heap pops the earliest, ties first-pushed first.
#[derive(Debug)]
struct Queued {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The whole model: hosts, desired state, gossip, ground truth and metrics.
pub(super) struct Model<'a> {
    pub sc: &'a Scenario,
    pub d: &'a Delays,
    pub rng: rand::rngs::ChaCha8Rng,
    queue: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    pub hosts: Vec<Host>,
    pub names: Vec<String>,
    pub views: Views,
    pub gossip: Gossip,
    /// Ground truth: the alive copies of each replica, host to the time it became ready.
    pub copies: BTreeMap<ReplicaId, BTreeMap<u32, u64>>,
    pub profiles: BTreeMap<String, InstanceProfile>,
    pub capacity: Resources,
    /// Per cell: how many times it went down or came back (to drop stale news).
    pub cell_changes: Vec<u32>,
    pub m: Metrics,
}

impl Model<'_> {
    /// Queues `ev` at `at`.
    pub fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let seq = self.seq;
        self.queue.push(Reverse(Queued { at, seq, ev }));
    }

    /// The hosts that are up, sorted.
    pub fn up_hosts(&self) -> Vec<u32> {
        (0..self.hosts.len() as u32)
            .filter(|h| self.hosts[*h as usize].up)
            .collect()
    }

    /// The hosts down now.
    pub fn down_hosts(&self) -> Vec<u32> {
        (0..self.hosts.len() as u32)
            .filter(|h| !self.hosts[*h as usize].up)
            .collect()
    }

    /// The cells with no host up now.
    pub fn down_cells(&self) -> Vec<u32> {
        (0..self.views.cell_count())
            .filter(|c| {
                self.views
                    .members(*c)
                    .iter()
                    .all(|h| !self.hosts[*h as usize].up)
            })
            .collect()
    }

    /// The truth: every host down now, every cell down now, the newest summaries and spec epoch.
    pub fn truth_key(&self) -> ViewKey {
        ViewKey {
            cell: None,
            dead: self.down_hosts(),
            down_cells: self.down_cells(),
            summaries: self.views.latest_summaries(),
            epoch: self.views.latest(),
        }
    }

    /// Up to a random round interval (a join or spec change waits for the agent's next round).
    pub fn jitter(&mut self) -> u64 {
        let interval = self.sc.host.reconcile_interval_ms.max(1);
        self.rng.random_range(0..interval)
    }

    fn step(&mut self, now: u64, ev: Ev) {
        self.m.events += 1;
        match ev {
            Ev::Fault(i) => self.fault(now, i),
            Ev::Crash(h) => self.crash(now, &[h]),
            Ev::Restart(h) => self.restart(now, h),
            Ev::Learn {
                observer,
                subject,
                incarnation,
                alive,
            } => self.learn(now, observer, subject, incarnation, alive),
            Ev::LearnSpecs { observer, epoch } => self.learn_specs(now, observer, epoch),
            Ev::LearnCell {
                observer,
                cell,
                change,
                down,
            } => self.learn_cell(now, observer, cell, change, down),
            Ev::LearnSummaries {
                observer,
                generation,
            } => self.learn_summaries(now, observer, generation),
            Ev::Apply(specs) => {
                let epoch = self.views.push_epoch(specs);
                let cells = self.views.cell_count() > 0;
                for o in 0..self.hosts.len() as u32 {
                    let at = now + self.d.spec(cells, &mut self.rng);
                    self.push(at, Ev::LearnSpecs { observer: o, epoch });
                }
            }
            Ev::Round { host, incarnation } => self.round_due(now, host, incarnation),
            Ev::Started {
                host,
                incarnation,
                replica,
                version,
                failed,
                fence_token,
            } => {
                if self.current(host, incarnation) {
                    self.started(now, host, replica, version, failed, fence_token);
                }
            }
            Ev::Exited {
                host,
                incarnation,
                handle,
            } => {
                if self.current(host, incarnation) {
                    self.exited(now, host, &handle, 1);
                }
            }
            Ev::Report { host, incarnation } => {
                if self.hosts[host as usize].incarnation == incarnation {
                    self.report_arrived(now, host);
                }
            }
        }
    }

    /// Whether host `h` is up in incarnation `incarnation`.
    pub fn current(&self, h: u32, incarnation: u32) -> bool {
        let host = &self.hosts[h as usize];
        host.up && host.incarnation == incarnation
    }
}

/// Runs the model tier on `sc` with `seed`.
pub fn simulate(sc: &Scenario, seed: u64, d: &Delays) -> ModelReport {
    let n = sc.mesh.nodes;
    let capacity = Resources::new(sc.mesh.cpu_millis, sc.mesh.memory_bytes);
    let names: Vec<String> = (0..n).map(|i| format!("n{}", i + 1)).collect();
    let nodes = names
        .iter()
        .enumerate()
        .map(|(i, name)| Node {
            id: name.clone(),
            capacity,
            labels: Default::default(),
            zone: sc.mesh.zones[i % sc.mesh.zones.len()].clone(),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let config = crate::host::reconcile_config(&sc.host);
    let views = Views::new(nodes, sc.mesh.cells);
    let hosts = names
        .iter()
        .enumerate()
        .map(|(i, name)| Host::new(i as u32, name, views.cell_of(i as u32), config.clone()))
        .collect();
    let mut m = Model {
        sc,
        d,
        rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
        queue: BinaryHeap::new(),
        seq: 0,
        hosts,
        names,
        cell_changes: vec![0; views.cell_count() as usize],
        views,
        gossip: Gossip::new(n as usize),
        copies: BTreeMap::new(),
        profiles: sc
            .workloads
            .iter()
            .map(|w| (w.spec.name.clone(), w.profile))
            .collect(),
        capacity,
        m: Metrics::default(),
    };
    for h in 0..n {
        let key = m.hosts[h as usize].key();
        m.views.enter(&key);
        let at = m.jitter();
        m.request_round(h, at);
    }
    let mut specs: Vec<WorkloadSpec> = Vec::new();
    let mut applies: BTreeMap<u64, Vec<WorkloadSpec>> = BTreeMap::new();
    for w in &sc.workloads {
        applies.entry(w.at_ms).or_default().push(w.spec.clone());
    }
    for (at, list) in applies {
        for s in list {
            specs.retain(|x| x.name != s.name);
            specs.push(s);
        }
        m.push(at, Ev::Apply(specs.clone()));
    }
    if !sc.mesh.hosts.is_empty() {
        let what =
            "[[hosts]]: capabilities and late joins (every host runs anything from the start)";
        m.m.ignored.push(what.to_string());
    }
    for (i, e) in sc.events.iter().enumerate() {
        match &e.action {
            Action::Crash { .. }
            | Action::Restart { .. }
            | Action::Flap { crash: true, .. }
            | Action::Instance { .. } => m.push(e.at_ms, Ev::Fault(i)),
            other => {
                m.m.ignored
                    .push(format!("line {}: {}", e.line, not_modelled(other)))
            }
        }
    }
    while let Some(Reverse(q)) = m.queue.pop() {
        if q.at > sc.duration_ms {
            break;
        }
        m.step(q.at, q.ev);
    }
    let desired: Vec<ReplicaId> = m.views.epochs[m.views.latest()]
        .specs
        .iter()
        .flat_map(|s| (0..s.replicas).map(|i| ReplicaId::new(&s.name, i)))
        .collect();
    let missing = desired
        .iter()
        .filter(|r| m.copies.get(*r).is_none_or(|c| c.is_empty()))
        .count() as u64;
    m.m.report(sc, seed, desired.len() as u64, missing)
}
