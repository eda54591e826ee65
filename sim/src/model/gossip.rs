//! What peers see of a host's observed state (`Reconciler::observed`): each snapshot a host
//! publishes becomes visible to every observer `report_ms` later, the gossip delay of the model.
//! A crashed host's last visible snapshot stays (agents keep a dead peer's state), so a peer's
//! copy is seen gone only once its stop was reported or the peer is seen dead; a restarted host's
//! previous snapshots are forgotten (only the newest incarnation speaks for a name).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use shoal_core::instance::ReplicaId;
use shoal_core::reconcile::InstanceStatus;

/// One published observed state.
pub(super) type Snapshot = Arc<Vec<InstanceStatus>>;

#[derive(Default)]
struct Published {
    /// (visible from, snapshot), oldest first. After a delivery the front is the one visible.
    history: VecDeque<(u64, Snapshot)>,
    /// The snapshot observers last saw change to (what a delivery compares against).
    delivered: Option<Snapshot>,
}

/// Every host's published states, and which hosts published a status of each replica.
pub(super) struct Gossip {
    hosts: Vec<Published>,
    reporters: BTreeMap<ReplicaId, BTreeSet<u32>>,
}

impl Gossip {
    /// Nothing published yet by any of `hosts` hosts.
    pub fn new(hosts: usize) -> Gossip {
        Gossip {
            hosts: (0..hosts).map(|_| Published::default()).collect(),
            reporters: BTreeMap::new(),
        }
    }

    /// Host `h` publishes `snapshot`, visible from `at`. False (nothing published) when it equals
    /// the last one published.
    pub fn publish(&mut self, h: u32, snapshot: Vec<InstanceStatus>, at: u64) -> bool {
        let p = &mut self.hosts[h as usize];
        if p.history.back().is_some_and(|(_, s)| **s == snapshot) {
            return false;
        }
        if let Some((last, _)) = p.history.back() {
            assert!(*last <= at, "gossip delay must not shrink");
        }
        for s in &snapshot {
            self.reporters
                .entry(s.replica.clone())
                .or_default()
                .insert(h);
        }
        p.history.push_back((at, Arc::new(snapshot)));
        true
    }

    /// What observers see of host `h` at `now`, if it has published anything visible yet.
    pub fn visible(&self, h: u32, now: u64) -> Option<&Snapshot> {
        self.hosts[h as usize]
            .history
            .iter()
            .rev()
            .find(|(at, _)| *at <= now)
            .map(|(_, s)| s)
    }

    /// A snapshot of host `h` became visible at `now`: drops what nobody can see any more and
    /// returns the replicas whose statuses changed since the last delivery, sorted.
    pub fn deliver(&mut self, h: u32, now: u64) -> Vec<ReplicaId> {
        let p = &mut self.hosts[h as usize];
        let mut dropped = Vec::new();
        while p.history.len() >= 2 && p.history[1].0 <= now {
            dropped.extend(p.history.pop_front().map(|(_, s)| s));
        }
        let current = p.history.front().filter(|(at, _)| *at <= now);
        let current = current.map(|(_, s)| s.clone());
        let empty = Vec::new();
        let before = p.delivered.as_deref().unwrap_or(&empty);
        let changed = changed_replicas(before, current.as_deref().unwrap_or(&empty));
        p.delivered = current;
        for s in dropped {
            self.unreport(h, &s);
        }
        changed
    }

    /// Host `h` restarted: its previous incarnation's snapshots are gone.
    pub fn forget(&mut self, h: u32) {
        let p = std::mem::take(&mut self.hosts[h as usize]);
        for (_, s) in p.history {
            self.unreport(h, &s);
        }
    }

    /// Hosts with a published status of `replica` (visible or about to be).
    pub fn reporters(&self, replica: &ReplicaId) -> impl Iterator<Item = u32> + '_ {
        self.reporters.get(replica).into_iter().flatten().copied()
    }

    /// Removes `h` as a reporter of the replicas of `dropped` that its remaining snapshots do
    /// not mention.
    fn unreport(&mut self, h: u32, dropped: &[InstanceStatus]) {
        let history = &self.hosts[h as usize].history;
        for s in dropped {
            let still = history
                .iter()
                .any(|(_, snap)| snap.iter().any(|x| x.replica == s.replica));
            if still {
                continue;
            }
            if let Some(set) = self.reporters.get_mut(&s.replica) {
                set.remove(&h);
                if set.is_empty() {
                    self.reporters.remove(&s.replica);
                }
            }
        }
    }
}

/// Replicas whose statuses differ between two snapshots (both sorted by replica, as
/// `Reconciler::observed` returns them).
fn changed_replicas(before: &[InstanceStatus], after: &[InstanceStatus]) -> Vec<ReplicaId> {
    let group = |list: &[InstanceStatus]| {
        let mut m: BTreeMap<ReplicaId, Vec<InstanceStatus>> = BTreeMap::new();
        for s in list {
            m.entry(s.replica.clone()).or_default().push(s.clone());
        }
        m
    };
    let (a, b) = (group(before), group(after));
    let keys: BTreeSet<&ReplicaId> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|r| a.get(*r) != b.get(*r))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::instance::Phase;

    fn status(replica: u32, phase: Phase) -> InstanceStatus {
        let handle = Some(format!("w-{replica}"));
        InstanceStatus::new(ReplicaId::new("w", replica), handle, phase, "v1")
    }

    #[test]
    fn a_snapshot_is_seen_after_the_delay_and_reports_what_changed() {
        let mut g = Gossip::new(2);
        assert!(g.publish(1, vec![status(0, Phase::Running)], 500));
        assert!(!g.publish(1, vec![status(0, Phase::Running)], 600));
        assert!(g.visible(1, 499).is_none());
        assert_eq!(g.deliver(1, 500), vec![ReplicaId::new("w", 0)]);
        assert!(g.publish(1, vec![status(1, Phase::Starting)], 900));
        assert_eq!(g.visible(1, 899).map(|s| s.len()), Some(1));
        assert_eq!(g.reporters(&ReplicaId::new("w", 0)).count(), 1);
        let changed = g.deliver(1, 900);
        assert_eq!(
            changed,
            vec![ReplicaId::new("w", 0), ReplicaId::new("w", 1)]
        );
        assert_eq!(g.reporters(&ReplicaId::new("w", 0)).count(), 0);
        g.forget(1);
        assert!(g.visible(1, 1_000).is_none());
        assert_eq!(g.reporters(&ReplicaId::new("w", 1)).count(), 0);
    }
}
