//! The scenario's faults in the model tier (crashes, restarts, crash flaps, instance profile
//! changes) and what the delay model makes of them: every up host learns of a death after its
//! detection delay and of a return after the join delay; the truth's placement diff counts the
//! moves. In a mesh of cells only the hosts of the same cell learn of a host; the others learn
//! of cells: a cell whose last host died is held down after the cell-down delay, a cell back
//! up after the join and an exchange, and a new generation of summaries when the envoys of a
//! cell republish a moved ranked figure.

use std::collections::BTreeSet;

use shoal_core::instance::ReplicaId;

use super::run::{Ev, Model};
use super::views::ViewKey;
use crate::scenario::select::{Pool, Selector};
use crate::scenario::Action;

impl Model<'_> {
    /// Hosts a selector picks among `hosts` now (`owner=W`: the host of W's lowest replica with
    /// an alive copy, as the real tier resolves it).
    fn resolve(&mut self, sel: &Selector, hosts: &[u32]) -> Vec<u32> {
        let zones = &self.sc.mesh.zones;
        let zone_of = |h: u32| zones[h as usize % zones.len()].clone();
        let copies = &self.copies;
        let owners_of = |w: &str| -> Vec<u32> {
            copies
                .range(ReplicaId::new(w, 0)..)
                .take_while(|(r, _)| r.workload == w)
                .flat_map(|(_, c)| c.keys().copied())
                .collect()
        };
        let pool = Pool {
            hosts,
            mesh_size: self.sc.mesh.nodes,
            zone_of: &zone_of,
            owners_of: &owners_of,
        };
        sel.resolve(&pool, &mut self.rng)
    }

    /// The scenario's event `index` fires: its hosts are picked now.
    pub fn fault(&mut self, now: u64, index: usize) {
        let sc = self.sc;
        match &sc.events[index].action {
            Action::Crash {
                target,
                restart_after_ms,
                ..
            } => {
                let up = self.up_hosts();
                let hosts = self.resolve(target, &up);
                self.crash(now, &hosts);
                for h in hosts {
                    if let Some(after) = restart_after_ms {
                        self.push(now + after, Ev::Restart(h));
                    }
                }
            }
            Action::Restart { target } => {
                let down: Vec<u32> = (0..self.hosts.len() as u32)
                    .filter(|h| !self.hosts[*h as usize].up)
                    .collect();
                for h in self.resolve(target, &down) {
                    self.restart(now, h);
                }
            }
            Action::Flap {
                target,
                down_ms,
                up_ms,
                count,
                crash: true,
            } => {
                let up = self.up_hosts();
                let hosts = self.resolve(target, &up);
                for k in 0..u64::from(*count) {
                    let at = now + k * (down_ms + up_ms);
                    for &h in &hosts {
                        self.push(at, Ev::Crash(h));
                        self.push(at + down_ms, Ev::Restart(h));
                    }
                }
            }
            Action::Instance { workload, profile } => {
                self.profiles.insert(workload.clone(), *profile);
            }
            _ => unreachable!("only modelled events are queued"),
        }
    }

    /// Hosts `hosts` die at once with their instances: every up host of their domain will learn
    /// it after its detection delay; then the cells' envoys republish, once.
    pub fn crash(&mut self, now: u64, hosts: &[u32]) {
        let old = self.truth_key();
        let mut domain = 0;
        let batch: BTreeSet<u32> = hosts.iter().copied().collect();
        let lost = |c: u32| {
            self.views
                .members(c)
                .iter()
                .all(|m| !self.hosts[*m as usize].up || batch.contains(m))
        };
        let lost_cells: BTreeSet<u32> = (0..self.views.cell_count()).filter(|c| lost(*c)).collect();
        let mut went_down = BTreeSet::new();
        for &h in hosts {
            if self.hosts[h as usize].up {
                let lost_cell = self.views.cell_of(h).filter(|c| lost_cells.contains(c));
                self.crash_host(now, h, lost_cell.is_some());
                went_down.extend(lost_cell);
                domain = domain.max(self.domain_size(h));
            }
        }
        for c in went_down {
            self.cell_changed(now, c, true);
        }
        if domain > 0 {
            self.republish(now, domain);
            self.membership_changed(old);
        }
    }

    /// Host `h` (up) dies with its instances (and with it its whole cell when `cell_lost`).
    fn crash_host(&mut self, now: u64, h: u32, cell_lost: bool) {
        let key = self.hosts[h as usize].key();
        self.views.leave(&key);
        let host = &mut self.hosts[h as usize];
        host.up = false;
        host.round_at = None;
        let held: BTreeSet<ReplicaId> = std::mem::take(&mut host.runtime)
            .into_values()
            .filter(|i| i.phase.may_be_alive())
            .map(|i| i.replica)
            .collect();
        for r in held {
            let copies = self.copies.entry(r.clone()).or_default();
            copies.remove(&h);
            let ready = copies.values().min().copied();
            let exclusive = self.views.epochs[self.views.latest()]
                .entries
                .get(&r.workload)
                .is_some_and(|e| e.spec.placement.exclusive);
            self.m
                .host_crashed_holding(r, now, ready, exclusive, cell_lost);
        }
        let observers = self.peers_of(h);
        self.m.crash_observed_by(h, now, observers.len());
        let incarnation = self.hosts[h as usize].incarnation;
        let domain = self.domain_size(h);
        for o in observers {
            let at = now + self.d.detection(domain, &mut self.rng);
            let ev = Ev::Learn {
                observer: o,
                subject: h,
                incarnation,
                alive: false,
            };
            self.push(at, ev);
        }
    }

    /// The up hosts that learn of host `h` directly: its cell's (every host's without cells).
    fn peers_of(&self, h: u32) -> Vec<u32> {
        let cell = self.views.cell_of(h);
        self.up_hosts()
            .into_iter()
            .filter(|o| *o != h && self.views.cell_of(*o) == cell)
            .collect()
    }

    /// The size of host `h`'s gossip domain: its cell, or the mesh.
    fn domain_size(&self, h: u32) -> u32 {
        match self.views.cell_of(h) {
            Some(c) => self.views.members(c).len() as u32,
            None => self.sc.mesh.nodes,
        }
    }

    /// Cell `c` went down (its last host died) or came back: the up hosts of the other cells
    /// learn it, after the cell-down delay or after the join and an exchange.
    fn cell_changed(&mut self, now: u64, c: u32, down: bool) {
        self.cell_changes[c as usize] += 1;
        let change = self.cell_changes[c as usize];
        for o in self.up_hosts() {
            if self.views.cell_of(o) == Some(c) {
                continue;
            }
            let at = match down {
                true => now + self.d.cell_down(&mut self.rng),
                false => self.d.cell_news(now + self.d.join_ms as u64, &mut self.rng),
            };
            let ev = Ev::LearnCell {
                observer: o,
                cell: c,
                change,
                down,
            };
            self.push(at, ev);
        }
    }

    /// The envoys of the cells republish from the live members: a new generation of summaries
    /// if a ranked figure moved, learned by every up host once the envoys saw the change
    /// (a detection in a domain of `domain` hosts) and an exchange carried it.
    fn republish(&mut self, now: u64, domain: u32) {
        let down = self.down_hosts().into_iter().collect();
        let Some(generation) = self.views.republish(&down) else {
            return;
        };
        for o in self.up_hosts() {
            let seen = now + self.d.detection(domain, &mut self.rng);
            let at = self.d.cell_news(seen, &mut self.rng);
            let ev = Ev::LearnSummaries {
                observer: o,
                generation,
            };
            self.push(at, ev);
        }
    }

    /// Host `h` comes back as a new agent that knows the truth (it joins before its first round);
    /// the others learn it after the join delay.
    pub fn restart(&mut self, now: u64, h: u32) {
        if self.hosts[h as usize].up {
            return;
        }
        let old = self.truth_key();
        let cell = self.views.cell_of(h);
        let cell_was_down = cell.is_some_and(|c| old.down_cells.contains(&c));
        let mut view = old.clone();
        view.cell = cell;
        // It joins its cell: it knows its cell's members, and the others through summaries.
        view.dead
            .retain(|d| *d != h && self.views.cell_of(*d) == cell);
        view.down_cells.retain(|c| Some(*c) != cell);
        let config = crate::host::reconcile_config(&self.sc.host);
        self.hosts[h as usize].restart(view, now, config);
        self.views.enter(&self.hosts[h as usize].key());
        self.gossip.forget(h);
        let incarnation = self.hosts[h as usize].incarnation;
        if let (Some(c), true) = (cell, cell_was_down) {
            self.cell_changed(now, c, false);
        }
        let domain = self.domain_size(h);
        self.republish(now, domain);
        for o in self.peers_of(h) {
            let at = now + self.d.join(&mut self.rng);
            let ev = Ev::Learn {
                observer: o,
                subject: h,
                incarnation,
                alive: true,
            };
            self.push(at, ev);
        }
        // The agent joins (its name check) before its first round.
        self.request_round(h, now + self.d.join_ms as u64);
        self.membership_changed(old);
    }

    /// An observer learns a death or a return; news about an earlier incarnation is dropped.
    pub fn learn(&mut self, now: u64, observer: u32, subject: u32, incarnation: u32, alive: bool) {
        let s = &self.hosts[subject as usize];
        if !self.hosts[observer as usize].up || s.incarnation != incarnation || (alive && !s.up) {
            return;
        }
        if !alive {
            self.m.detected(subject, now);
        }
        let old = self.hosts[observer as usize].key();
        let dead = &mut self.hosts[observer as usize].dead;
        let changed = if alive {
            dead.remove(&subject)
        } else {
            dead.insert(subject)
        };
        if changed {
            // A death wakes the agent at once; a join waits for its next round.
            self.view_changed(now, observer, &old, !alive);
        }
    }

    /// An agent of another cell learns that cell `c` went down or came back; news of an earlier
    /// change is dropped.
    pub fn learn_cell(&mut self, now: u64, observer: u32, c: u32, change: u32, down: bool) {
        if !self.hosts[observer as usize].up || self.cell_changes[c as usize] != change {
            return;
        }
        let old = self.hosts[observer as usize].key();
        let host = &mut self.hosts[observer as usize];
        let changed = match down {
            true => host.down_cells.insert(c, now).is_none(),
            false => host.down_cells.remove(&c).is_some(),
        };
        if changed {
            self.view_changed(now, observer, &old, down);
        }
    }

    /// A host receives a generation of the cells' summaries (never an older one than it holds).
    pub fn learn_summaries(&mut self, now: u64, observer: u32, generation: usize) {
        let host = &self.hosts[observer as usize];
        if !host.up || generation <= host.summaries {
            return;
        }
        let old = host.key();
        self.hosts[observer as usize].summaries = generation;
        self.view_changed(now, observer, &old, false);
    }

    /// A host receives a spec epoch (never an older one than it holds).
    pub fn learn_specs(&mut self, now: u64, observer: u32, epoch: usize) {
        let host = &self.hosts[observer as usize];
        if !host.up || epoch <= host.epoch {
            return;
        }
        let old = host.key();
        self.hosts[observer as usize].epoch = epoch;
        self.view_changed(now, observer, &old, false);
    }

    /// Host `observer`'s view moved from `old` to what it holds now: the views in use follow, and
    /// it runs a round, at once when `urgent` (a death), else at its next round.
    fn view_changed(&mut self, now: u64, observer: u32, old: &ViewKey, urgent: bool) {
        self.views.leave(old);
        self.views.enter(&self.hosts[observer as usize].key());
        let at = if urgent { now } else { now + self.jitter() };
        self.request_round(observer, at);
    }

    /// Counts the moves of the truth's placement from `old_truth` to now.
    fn membership_changed(&mut self, old_truth: ViewKey) {
        let new = self.truth_key();
        let (before, after) = (self.views.placement(&old_truth), self.views.placement(&new));
        let mut moves = Vec::new();
        for (r, old) in &before.owners {
            if after.owners.get(r).is_some_and(|n| n != old) {
                moves.push(!self.hosts[*old as usize].up);
            }
        }
        self.m.membership_changed(&moves);
    }
}

/// The kind of an event the model does not model, for the report.
pub(super) fn not_modelled(action: &Action) -> &'static str {
    match action {
        Action::Pause { .. } => "pause",
        Action::Starve { .. } => "starve",
        Action::SlowLink { .. } => "slow-link",
        Action::Partition { .. } => "partition",
        Action::Heal => "heal",
        Action::Link { .. } => "link",
        Action::Clock { .. } => "clock",
        Action::Apply { .. } => "apply",
        Action::Scale { .. } => "scale",
        Action::Update { .. } => "update",
        Action::Delete { .. } => "delete",
        Action::Drain { .. } => "drain",
        Action::Flap { .. } => "flap (network)",
        Action::Upgrade { .. } => "upgrade",
        Action::Crash { .. } | Action::Restart { .. } | Action::Instance { .. } => "modelled",
    }
}
