//! Replaying the capacity pass for the engine, folding the new outcomes into the published
//! [`Placement`] (only changed replicas touch the maps), and the engine's self-checks.

use std::collections::BTreeMap;

use super::engine::PlacementEngine;
use super::greedy::{self, Outcome};
use super::model::{Placement, ReplicaId, Spread};
use crate::resources::Resources;

impl PlacementEngine {
    /// The placement of the current inputs, replaying the capacity pass first if anything changed
    /// since the last call.
    pub fn placement(&mut self) -> &Placement {
        if self.stale {
            self.replay();
        }
        &self.placement
    }

    /// The placement of the current inputs, consuming the engine.
    pub fn into_placement(mut self) -> Placement {
        self.placement();
        self.placement
    }

    fn replay(&mut self) {
        if self.order_stale {
            let mut order: Vec<u32> = (0..self.workloads.len() as u32)
                .filter(|&w| self.workloads[w as usize].is_some())
                .collect();
            order.sort_by(|&a, &b| {
                let a = self.workloads[a as usize].as_ref().expect("listed");
                let b = self.workloads[b as usize].as_ref().expect("listed");
                b.spec
                    .priority
                    .cmp(&a.spec.priority)
                    .then(a.hash.cmp(&b.hash))
                    .then(a.spec.id.cmp(&b.spec.id))
            });
            self.order = order;
            self.order_stale = false;
        }
        let fresh = greedy::run(
            &self.nodes,
            &self.classes,
            &mut self.workloads,
            &self.order,
            self.node_epoch,
        );
        for (slot, new) in fresh.iter().enumerate() {
            let Some(t) = &self.workloads[slot] else {
                continue;
            };
            let old = &self.outcomes[slot];
            for replica in 0..old.len().max(new.len()) {
                let (before, after) = (old.get(replica), new.get(replica));
                if before == after {
                    continue;
                }
                let id = ReplicaId::new(&t.spec.id, replica as u32);
                match after {
                    None => {
                        self.placement.assigned.remove(&id);
                        self.placement.unschedulable.remove(&id);
                    }
                    Some(Outcome::Assigned { slot, .. }) => {
                        self.placement.unschedulable.remove(&id);
                        let node = self.nodes.ids[*slot as usize].clone();
                        self.placement.assigned.insert(id, node);
                    }
                    Some(Outcome::Unschedulable(reason)) => {
                        self.placement.assigned.remove(&id);
                        self.placement.unschedulable.insert(id, reason.clone());
                    }
                }
            }
        }
        self.outcomes = fresh;
        self.stale = false;
    }

    /// Asserts the engine's invariants: every replica placed exactly once or unschedulable, no node
    /// over capacity in any resource, no draining node used, a workload's replicas on distinct
    /// nodes, zone spread respected while a new zone was available, and every cached ranking an
    /// exact prefix of its full order. For tests and the simulator: it recomputes every ranking.
    pub fn check_invariants(&mut self) {
        self.placement();
        let mut used: BTreeMap<u32, Resources> = BTreeMap::new();
        let mut expected = 0usize;
        for (slot, t) in self.workloads.iter().enumerate() {
            let Some(t) = t else { continue };
            let outcomes = &self.outcomes[slot];
            assert_eq!(
                outcomes.len(),
                t.spec.replicas as usize,
                "{}: replica count",
                t.spec.id
            );
            expected += outcomes.len();
            let mut nodes_held: Vec<u32> = Vec::new();
            for (replica, o) in outcomes.iter().enumerate() {
                let id = ReplicaId::new(&t.spec.id, replica as u32);
                let assigned = self.placement.assigned.get(&id);
                let unschedulable = self.placement.unschedulable.get(&id);
                // Exclusive or not, a replica has exactly one node or none.
                assert!(
                    assigned.is_some() != unschedulable.is_some(),
                    "{id} placed {assigned:?} / {unschedulable:?}"
                );
                if let Outcome::Assigned { slot: n, .. } = o {
                    let node = self.nodes.spec(*n);
                    assert_eq!(assigned, Some(&node.id), "{id}: published node differs");
                    assert!(!node.draining, "{id} on draining node {}", node.id);
                    assert!(
                        t.spec.constraints.iter().all(|c| c.matches(
                            &node.labels,
                            &node.zone,
                            &node.id
                        )),
                        "{id} on ineligible node {}",
                        node.id
                    );
                    let u = used.entry(*n).or_default();
                    *u = u.saturating_add(&t.spec.request);
                    nodes_held.push(*n);
                }
            }
            let count = nodes_held.len();
            nodes_held.sort_unstable();
            nodes_held.dedup();
            assert_eq!(
                nodes_held.len(),
                count,
                "{}: two replicas on one node",
                t.spec.id
            );
            if t.spec.spread == Spread::Zone {
                let mut zones: Vec<u32> = nodes_held
                    .iter()
                    .map(|&n| self.nodes.zone[n as usize])
                    .collect();
                zones.sort_unstable();
                zones.dedup();
                let class_zones = self.classes.get(t.class).zones as usize;
                assert!(
                    zones.len() == count || zones.len() <= class_zones,
                    "{}: zone spread",
                    t.spec.id
                );
            }
            let mut t = t.clone();
            let (scan, ranking, _) = t.parts(&self.nodes, &self.classes);
            ranking.check_exact(&scan);
        }
        for (n, u) in used {
            let cap = self.nodes.capacity[n as usize];
            assert!(
                u.fits_in(&cap),
                "node {} over capacity: {u:?} > {cap:?}",
                self.nodes.ids[n as usize]
            );
        }
        assert_eq!(
            self.placement.assigned.len() + self.placement.unschedulable.len(),
            expected
        );
    }
}
