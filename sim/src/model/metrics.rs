//! What the model tier measures, from the ground truth (the hosts' runtimes) and the delay
//! model, never from what a reconciler believes.

use std::collections::BTreeMap;

use shoal_core::instance::ReplicaId;

use super::ModelReport;
use crate::check::stats::Dist;
use crate::scenario::Scenario;

/// A replica of a crashed host waiting for a copy elsewhere.
struct Pending {
    replica: ReplicaId,
    crash_ms: u64,
    exclusive: bool,
    /// The crash took the host's whole cell.
    cell_lost: bool,
}

/// Counters and samples of one run.
#[derive(Default)]
pub(super) struct Metrics {
    detection: Vec<u64>,
    detection_all: Vec<u64>,
    replacement: Vec<u64>,
    replacement_exclusive: Vec<u64>,
    /// Of both, the replicas of hosts whose cell survived, and of cells lost whole.
    replacement_host: Vec<u64>,
    replacement_cell: Vec<u64>,
    pending: Vec<Pending>,
    /// Per crashed host: crash time and observers that have not detected it yet.
    crashes: BTreeMap<u32, (u64, usize)>,
    changes: u64,
    moves: u64,
    forced: u64,
    pub starts: u64,
    pub stops: u64,
    pub rounds: u64,
    pub events: u64,
    exclusive_duplicates: u64,
    last_action_ms: u64,
    pub ignored: Vec<String>,
}

impl Metrics {
    /// A crashed host held an alive copy of `replica`; `ready` is when the earliest other alive
    /// copy became ready, if one runs (its replacement then took no time); `cell_lost` when the
    /// crash took the host's whole cell.
    pub fn host_crashed_holding(
        &mut self,
        replica: ReplicaId,
        now: u64,
        ready: Option<u64>,
        exclusive: bool,
        cell_lost: bool,
    ) {
        let p = Pending {
            replica,
            crash_ms: now,
            exclusive,
            cell_lost,
        };
        match ready {
            Some(t) => self.replaced(&p, t),
            None => self.pending.push(p),
        }
    }

    fn replaced(&mut self, p: &Pending, ready_ms: u64) {
        let ms = ready_ms.saturating_sub(p.crash_ms);
        match p.exclusive {
            true => self.replacement_exclusive.push(ms),
            false => self.replacement.push(ms),
        }
        match p.cell_lost {
            true => self.replacement_cell.push(ms),
            false => self.replacement_host.push(ms),
        }
    }

    /// Host `h` crashed at `now`, seen by `observers` up hosts.
    pub fn crash_observed_by(&mut self, h: u32, now: u64, observers: usize) {
        self.crashes.insert(h, (now, observers));
    }

    /// One observer learned that `h` died.
    pub fn detected(&mut self, h: u32, now: u64) {
        if let Some((t, left)) = self.crashes.get_mut(&h) {
            self.detection.push(now - *t);
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.detection_all.push(now - *t);
            }
        }
    }

    /// The truth's membership changed; `moves` holds one entry per replica whose owner changed,
    /// true when its old owner is down (a forced move).
    pub fn membership_changed(&mut self, moves: &[bool]) {
        self.changes += 1;
        self.moves += moves.len() as u64;
        self.forced += moves.iter().filter(|f| **f).count() as u64;
    }

    /// A start or stop was executed at `now`.
    pub fn acted(&mut self, now: u64) {
        self.last_action_ms = self.last_action_ms.max(now);
    }

    /// A copy of `replica` became ready at `now`; `alive` copies run now, this one included.
    pub fn copy_ready(&mut self, replica: &ReplicaId, now: u64, alive: usize, exclusive: bool) {
        self.acted(now);
        if exclusive && alive > 1 {
            self.exclusive_duplicates += 1;
        }
        let (done, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| &p.replica == replica);
        self.pending = rest;
        for p in done {
            self.replaced(&p, now);
        }
    }

    /// The report, with the replicas desired at the end and how many of them had no copy.
    pub fn report(self, sc: &Scenario, seed: u64, replicas: u64, missing: u64) -> ModelReport {
        let all: Vec<u64> = self
            .replacement
            .iter()
            .chain(&self.replacement_exclusive)
            .copied()
            .collect();
        let desired = |r: &ReplicaId| {
            sc.workloads
                .iter()
                .rev()
                .find(|w| w.spec.name == r.workload)
                .is_some_and(|w| r.replica < w.spec.replicas)
        };
        ModelReport {
            scenario: sc.name.clone(),
            seed,
            nodes: sc.mesh.nodes,
            replicas,
            detection: Dist::of(&self.detection),
            detection_all: Dist::of(&self.detection_all),
            replacement: Dist::of(&all),
            replacement_p99_ms: Dist::of(&all).p99_ms,
            replacement_exclusive: Dist::of(&self.replacement_exclusive),
            replacement_host: Dist::of(&self.replacement_host),
            replacement_cell_lost: Dist::of(&self.replacement_cell),
            unreplaced: self.pending.iter().filter(|p| desired(&p.replica)).count() as u64,
            membership_changes: self.changes,
            moves: self.moves,
            forced_moves: self.forced,
            starts: self.starts,
            stops: self.stops,
            exclusive_duplicates: self.exclusive_duplicates,
            missing_at_end: missing,
            converged_after_last_fault_ms: Some(
                self.last_action_ms.saturating_sub(sc.last_fault_end_ms()),
            ),
            rounds: self.rounds,
            events: self.events,
            ignored: self.ignored,
            wall_seconds: 0.0,
            sim_seconds: sc.duration_ms as f64 / 1000.0,
        }
    }
}
