//! The discrete-event loop of the model tier.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

use rand::SeedableRng;
use shoal::mesh::view::placement_workload;
use shoal_core::instance::ReplicaId;
use shoal_core::placement::{model::Node, PlacementEngine};
use shoal_core::spec::WorkloadSpec;
use shoal_core::Resources;

use super::{Delays, ModelReport};
use crate::check::stats::Dist;
use crate::scenario::{Action, Scenario};

/// A view: the hosts an observer holds dead, and the spec epoch it has.
type ViewKey = (Vec<u32>, usize);
type Owners = Arc<BTreeMap<ReplicaId, u32>>;

#[derive(Debug)]
enum Ev {
    Crash(u32),
    Restart(u32),
    Learn {
        observer: u32,
        subject: u32,
        alive: bool,
    },
    LearnSpecs {
        observer: u32,
        epoch: usize,
    },
    Start {
        host: u32,
        replica: ReplicaId,
    },
    Ready {
        host: u32,
        replica: ReplicaId,
    },
    Stop {
        host: u32,
        replica: ReplicaId,
    },
    Apply(Vec<WorkloadSpec>),
}

struct Model<'a> {
    sc: &'a Scenario,
    d: &'a Delays,
    rng: rand::rngs::ChaCha8Rng,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Ev>,
    seq: u64,
    nodes: Vec<Node>,
    up: Vec<bool>,
    views: Vec<(BTreeSet<u32>, usize)>,
    epochs: Vec<Vec<WorkloadSpec>>,
    placements: HashMap<ViewKey, Owners>,
    copies: BTreeMap<ReplicaId, BTreeMap<u32, u64>>,
    pending: Vec<(ReplicaId, u64)>,
    r: Report,
}

#[derive(Default)]
struct Report {
    detection: Vec<u64>,
    detection_all: Vec<u64>,
    replacement: Vec<u64>,
    crashes: BTreeMap<u32, (u64, usize)>,
    changes: u64,
    moves: u64,
    forced: u64,
    starts: u64,
    stops: u64,
    last_action_ms: u64,
    processed: u64,
    ignored: Vec<String>,
}

fn name(h: u32) -> String {
    format!("n{}", h + 1)
}

impl Model<'_> {
    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// The placement of a view: the real engine, the hosts the view holds dead marked down (as
    /// agents keep them until chitchat forgets them, an hour later).
    fn owners(&mut self, key: &ViewKey) -> Owners {
        if let Some(o) = self.placements.get(key) {
            return o.clone();
        }
        let dead: BTreeSet<u32> = key.0.iter().copied().collect();
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut n = n.clone();
                n.down = dead.contains(&(i as u32));
                n
            })
            .collect();
        let workloads: Vec<_> = self.epochs[key.1].iter().map(placement_workload).collect();
        let placement = PlacementEngine::new(&nodes, &workloads).into_placement();
        let owners: BTreeMap<ReplicaId, u32> = placement
            .assigned
            .into_iter()
            .map(|(r, n)| (r, n.trim_start_matches('n').parse::<u32>().unwrap_or(1) - 1))
            .collect();
        let owners = Arc::new(owners);
        self.placements.insert(key.clone(), owners.clone());
        owners
    }

    fn view_key(&self, h: u32) -> ViewKey {
        let (dead, epoch) = &self.views[h as usize];
        (dead.iter().copied().collect(), *epoch)
    }

    fn truth_key(&self) -> ViewKey {
        let down = (0..self.up.len() as u32)
            .filter(|h| !self.up[*h as usize])
            .collect();
        (down, self.epochs.len() - 1)
    }

    fn spec_of(&self, h: u32, r: &ReplicaId) -> Option<&WorkloadSpec> {
        self.epochs[self.views[h as usize].1]
            .iter()
            .find(|s| s.name == r.workload)
    }

    fn start_ms(&self, workload: &str) -> u64 {
        self.sc
            .workloads
            .iter()
            .find(|w| w.spec.name == workload)
            .map_or(500, |w| w.profile.start_ms)
    }

    /// An observer's view changed from `old` to its current one: it starts what became its own
    /// and stops what left it.
    fn reconcile(&mut self, now: u64, h: u32, old: ViewKey) {
        let new = self.view_key(h);
        let (before, after) = (self.owners(&old), self.owners(&new));
        for (r, owner) in after.iter() {
            if *owner == h
                && before.get(r) != Some(&h)
                && !self.copies.get(r).is_some_and(|c| c.contains_key(&h))
            {
                let exclusive = self.spec_of(h, r).is_some_and(|s| s.placement.exclusive);
                let prev_dead = before
                    .get(r)
                    .is_some_and(|p| self.views[h as usize].0.contains(p));
                let wait = if exclusive && prev_dead {
                    self.d.fence_delay_ms as u64
                } else {
                    0
                };
                let at = now + self.d.reconcile(&mut self.rng) + wait;
                self.push(
                    at,
                    Ev::Start {
                        host: h,
                        replica: r.clone(),
                    },
                );
            }
        }
        let held: Vec<ReplicaId> = self
            .copies
            .iter()
            .filter(|(_, c)| c.contains_key(&h))
            .map(|(r, _)| r.clone())
            .collect();
        for r in held {
            if after.get(&r) != Some(&h) {
                let exclusive = self.spec_of(h, &r).is_some_and(|s| s.placement.exclusive);
                let handoff = if exclusive || !after.contains_key(&r) {
                    0
                } else {
                    self.start_ms(&r.workload) + self.d.report_ms as u64
                };
                let at = now + self.d.reconcile(&mut self.rng) + handoff;
                self.push(
                    at,
                    Ev::Stop {
                        host: h,
                        replica: r,
                    },
                );
            }
        }
    }

    fn membership_changed(&mut self, old_truth: ViewKey) {
        let new = self.truth_key();
        let (before, after) = (self.owners(&old_truth), self.owners(&new));
        self.r.changes += 1;
        for (r, old) in before.iter() {
            if let Some(n) = after.get(r).filter(|n| *n != old) {
                let _ = n;
                self.r.moves += 1;
                self.r.forced += u64::from(!self.up[*old as usize]);
            }
        }
    }

    fn step(&mut self, now: u64, ev: Ev) {
        self.r.processed += 1;
        match ev {
            Ev::Crash(h) if self.up[h as usize] => {
                let old = self.truth_key();
                self.up[h as usize] = false;
                let mut held = 0;
                for (r, c) in self.copies.iter_mut() {
                    if c.remove(&h).is_some() {
                        self.pending.push((r.clone(), now));
                        held += 1;
                    }
                }
                let observers: Vec<u32> = (0..self.up.len() as u32)
                    .filter(|o| self.up[*o as usize])
                    .collect();
                self.r.crashes.insert(h, (now, observers.len()));
                for o in observers {
                    let at = now + self.d.detection(self.sc.mesh.nodes, &mut self.rng);
                    self.push(
                        at,
                        Ev::Learn {
                            observer: o,
                            subject: h,
                            alive: false,
                        },
                    );
                }
                let _ = held;
                self.membership_changed(old);
            }
            Ev::Restart(h) if !self.up[h as usize] => {
                let old = self.truth_key();
                self.up[h as usize] = true;
                let down: BTreeSet<u32> = (0..self.up.len() as u32)
                    .filter(|x| !self.up[*x as usize])
                    .collect();
                self.views[h as usize] = (down, self.epochs.len() - 1);
                let observers: Vec<u32> = (0..self.up.len() as u32)
                    .filter(|o| *o != h && self.up[*o as usize])
                    .collect();
                for o in observers {
                    let at = now + self.d.join(&mut self.rng);
                    self.push(
                        at,
                        Ev::Learn {
                            observer: o,
                            subject: h,
                            alive: true,
                        },
                    );
                }
                self.membership_changed(old);
                let empty = (Vec::new(), 0);
                self.placements
                    .entry(empty.clone())
                    .or_insert_with(|| Arc::new(BTreeMap::new()));
                self.reconcile(now + self.d.join_ms as u64, h, empty);
            }
            Ev::Learn {
                observer,
                subject,
                alive,
            } if self.up[observer as usize] => {
                let old = self.view_key(observer);
                let dead = &mut self.views[observer as usize].0;
                let changed = if alive {
                    dead.remove(&subject)
                } else {
                    dead.insert(subject)
                };
                if !alive {
                    if let Some((t, left)) = self.r.crashes.get_mut(&subject) {
                        self.r.detection.push(now - *t);
                        *left -= 1;
                        if *left == 0 {
                            self.r.detection_all.push(now - *t);
                        }
                    }
                }
                if changed {
                    self.reconcile(now, observer, old);
                }
            }
            Ev::LearnSpecs { observer, epoch } if self.up[observer as usize] => {
                let old = self.view_key(observer);
                self.views[observer as usize].1 = epoch.max(old.1);
                self.reconcile(now, observer, old);
            }
            Ev::Start { host, replica } if self.up[host as usize] => {
                let mine = self.owners(&self.view_key(host)).get(&replica) == Some(&host);
                let ready = now + self.start_ms(&replica.workload);
                let copies = self.copies.entry(replica.clone()).or_default();
                if mine && !copies.contains_key(&host) {
                    copies.insert(host, ready);
                    self.r.starts += 1;
                    self.r.last_action_ms = now;
                    self.push(ready, Ev::Ready { host, replica });
                }
            }
            Ev::Ready { host, replica } if self.up[host as usize] => {
                let (pending, mut rest) = (std::mem::take(&mut self.pending), Vec::new());
                for (r, t) in pending {
                    if r == replica {
                        self.r.replacement.push(now - t)
                    } else {
                        rest.push((r, t))
                    }
                }
                self.pending = rest;
                self.r.last_action_ms = self.r.last_action_ms.max(now);
            }
            Ev::Stop { host, replica } if self.up[host as usize] => {
                let mine = self.owners(&self.view_key(host)).get(&replica) == Some(&host);
                if !mine
                    && self
                        .copies
                        .get_mut(&replica)
                        .is_some_and(|c| c.remove(&host).is_some())
                {
                    self.r.stops += 1;
                    self.r.last_action_ms = now;
                }
            }
            Ev::Apply(specs) => {
                self.epochs.push(specs);
                let epoch = self.epochs.len() - 1;
                for o in 0..self.up.len() as u32 {
                    let at = now + self.d.spec(&mut self.rng);
                    self.push(at, Ev::LearnSpecs { observer: o, epoch });
                }
            }
            _ => {}
        }
    }
}

/// Runs the model tier on `sc` with `seed`.
pub fn simulate(sc: &Scenario, seed: u64, d: &Delays) -> ModelReport {
    let n = sc.mesh.nodes;
    let nodes = (0..n)
        .map(|i| Node {
            id: name(i),
            capacity: Resources::new(sc.mesh.cpu_millis, sc.mesh.memory_bytes),
            labels: Default::default(),
            zone: sc.mesh.zones[i as usize % sc.mesh.zones.len()].clone(),
            draining: false,
            down: false,
        })
        .collect();
    let mut m = Model {
        sc,
        d,
        rng: rand::rngs::ChaCha8Rng::seed_from_u64(seed),
        heap: BinaryHeap::new(),
        events: HashMap::new(),
        seq: 0,
        nodes,
        up: vec![true; n as usize],
        views: vec![(BTreeSet::new(), 0); n as usize],
        epochs: vec![Vec::new()],
        placements: HashMap::new(),
        copies: BTreeMap::new(),
        pending: Vec::new(),
        r: Report::default(),
    };
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
    for e in &sc.events {
        match &e.action {
            Action::Crash {
                target,
                restart_after_ms,
                ..
            } => {
                let hosts = crate::scenario::select::resolve_static(target, n, &mut m.rng);
                for h in hosts {
                    m.push(e.at_ms, Ev::Crash(h));
                    if let Some(after) = restart_after_ms {
                        m.push(e.at_ms + after, Ev::Restart(h));
                    }
                }
            }
            Action::Flap {
                target,
                down_ms,
                up_ms,
                count,
                crash: true,
            } => {
                let hosts = crate::scenario::select::resolve_static(target, n, &mut m.rng);
                for k in 0..u64::from(*count) {
                    let at = e.at_ms + k * (down_ms + up_ms);
                    for &h in &hosts {
                        m.push(at, Ev::Crash(h));
                        m.push(at + down_ms, Ev::Restart(h));
                    }
                }
            }
            other => m.r.ignored.push(format!(
                "line {}: {:?}",
                e.line,
                std::mem::discriminant(other)
            )),
        }
    }
    while let Some(Reverse((at, seq))) = m.heap.pop() {
        if at > sc.duration_ms {
            break;
        }
        let ev = m.events.remove(&seq).expect("event stored");
        m.step(at, ev);
    }
    let last_fault = sc.last_fault_end_ms();
    let replicas = m
        .epochs
        .last()
        .map_or(0, |s| s.iter().map(|w| u64::from(w.replicas)).sum());
    ModelReport {
        scenario: sc.name.clone(),
        seed,
        nodes: n,
        replicas,
        detection: Dist::of(&m.r.detection),
        detection_all: Dist::of(&m.r.detection_all),
        replacement_p99_ms: Dist::of(&m.r.replacement).p99_ms,
        replacement: Dist::of(&m.r.replacement),
        membership_changes: m.r.changes,
        moves: m.r.moves,
        forced_moves: m.r.forced,
        starts: m.r.starts,
        stops: m.r.stops,
        converged_after_last_fault_ms: m.r.last_action_ms.checked_sub(last_fault),
        events: m.r.processed,
        ignored: m.r.ignored,
        wall_seconds: 0.0,
        sim_seconds: sc.duration_ms as f64 / 1000.0,
    }
}
