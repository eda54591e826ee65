//! Replaying the capacity pass for the engine, folding the new outcomes into the published
//! [`Placement`] (only changed replicas touch the maps), and the engine's self-checks.

use std::collections::BTreeMap;

use super::accept::{self, Mode, Outcome};
use super::engine::{PlacementEngine, Which};
use super::model::{Placement, ReplicaId, Spread};
use super::sticky;
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
        let mut changed = Vec::new();
        if self.ideal_stale {
            accept::run(
                (&self.nodes, &self.classes),
                &mut self.workloads,
                &self.order,
                self.node_epoch,
                &mut self.ideal,
                &mut changed,
                Mode::Ideal,
            );
            self.ideal_stale = false;
            changed.clear();
        }
        // With every node available and every data holder at its replica's ideal node (no sticky
        // entries at all, mostly), the actual placement is the ideal one.
        if self.nodes.any_unavailable()
            || sticky::diverges(&self.nodes, &self.workloads, &self.ideal)
        {
            accept::run(
                (&self.nodes, &self.classes),
                &mut self.workloads,
                &self.order,
                self.node_epoch,
                &mut self.outcomes,
                &mut changed,
                Mode::Actual { ideal: &self.ideal },
            );
        } else {
            for (slot, (out, ideal)) in self.outcomes.iter_mut().zip(&self.ideal).enumerate() {
                if out == ideal {
                    continue;
                }
                let replicas = out.len().max(ideal.len());
                changed.extend(
                    (0..replicas)
                        .filter(|&r| out.get(r) != ideal.get(r))
                        .map(|r| (slot as u32, r as u32)),
                );
                out.clone_from(ideal);
            }
        }
        for (slot, replica) in changed {
            let t = self.workloads[slot as usize]
                .as_ref()
                .expect("placed workload");
            // A replica past the end is gone; its id went with the indices it had (`unpublish`).
            let Some(&index) = t.indices.get(replica as usize) else {
                continue;
            };
            let id = ReplicaId::new(&t.spec.id, index);
            match self.outcomes[slot as usize].get(replica as usize) {
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
        self.stale = false;
    }

    /// Asserts the engine's invariants: every replica placed exactly once or unschedulable, no node
    /// over capacity in any resource, no down or draining node used, a workload's replicas on distinct
    /// nodes, replicas sharing a zone only when no node of an unused zone has room for one, a
    /// replica unschedulable only when no eligible node free of its siblings has room (and, for
    /// fixed ports held exclusively, of replicas of other workloads fixing one of its ports), no
    /// fixed port held exclusively by two workloads' replicas on one node, and every
    /// cached ranking an exact prefix of its full order. For tests and the simulator: it recomputes
    /// every ranking.
    pub fn check_invariants(&mut self) {
        self.placement();
        let mut used: BTreeMap<u32, Resources> = BTreeMap::new();
        let mut expected = 0usize;
        // Zone-spread workloads whose replicas share a zone (with the zones they use), and
        // workloads with unschedulable replicas (with the nodes they hold).
        let mut shared: Vec<(usize, Vec<u32>)> = Vec::new();
        let mut waiting: Vec<(usize, Vec<u32>)> = Vec::new();
        // (node, port, workload slot) of every fixed port held exclusively.
        let mut ports: Vec<(u32, super::model::HostPort, usize)> = Vec::new();
        for (slot, t) in self.workloads.iter().enumerate() {
            let Some(t) = t else { continue };
            let outcomes = &self.outcomes[slot];
            assert_eq!(
                outcomes.len(),
                t.indices.len(),
                "{}: replica count",
                t.spec.id
            );
            expected += outcomes.len();
            let mut nodes_held: Vec<u32> = Vec::new();
            // (zone, at the node holding its data) of each placed replica.
            let mut zones_held: Vec<(u32, bool)> = Vec::new();
            for (replica, o) in outcomes.iter().enumerate() {
                let id = ReplicaId::new(&t.spec.id, t.indices[replica]);
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
                    assert!(
                        node.available(),
                        "{id} on down or draining node {}",
                        node.id
                    );
                    assert!(
                        t.spec.constraints.iter().all(|c| c.matches(
                            &node.labels,
                            &node.zone,
                            &node.id
                        )),
                        "{id} on ineligible node {}",
                        node.id
                    );
                    if t.spec.ports_exclusive {
                        ports.extend(t.spec.needs.fixed_ports.iter().map(|&p| (*n, p, slot)));
                    }
                    let u = used.entry(*n).or_default();
                    *u = u.saturating_add(&t.spec.request);
                    nodes_held.push(*n);
                    let pinned = sticky::holder(&self.nodes, t, t.indices[replica]) == Some(*n);
                    zones_held.push((self.nodes.zone[*n as usize], pinned));
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
            zones_held.sort_unstable();
            // Replicas at the node holding their data stay in a shared zone; zone repair moves
            // the others.
            let movable_sharer = zones_held
                .chunk_by(|a, b| a.0 == b.0)
                .any(|zone| zone.len() > 1 && zone.iter().any(|&(_, pinned)| !pinned));
            let mut zones: Vec<u32> = zones_held.iter().map(|h| h.0).collect();
            zones.dedup();
            if t.spec.spread == Spread::Zone && movable_sharer {
                shared.push((slot, zones));
            }
            if count < outcomes.len() {
                waiting.push((slot, nodes_held));
            }
            t.order
                .check_exact(&t.scan(&self.nodes, &self.classes, Which::Order));
            for (p, ranking) in t.rankings.iter().enumerate() {
                ranking.check_exact(&t.scan(&self.nodes, &self.classes, Which::Replica(p)));
            }
        }
        for (&n, u) in &used {
            let cap = self.nodes.capacity[n as usize];
            assert!(
                u.fits_in(&cap),
                "node {} over capacity: {u:?} > {cap:?}",
                self.nodes.ids[n as usize]
            );
        }
        ports.sort_unstable();
        for pair in ports.windows(2) {
            assert!(
                (pair[0].0, pair[0].1) != (pair[1].0, pair[1].1),
                "node {} holds two workloads' replicas fixing host port {}",
                self.nodes.ids[pair[0].0 as usize],
                pair[0].1
            );
        }
        // A node where another workload's replica fixes one of the workload's ports has no room
        // for it.
        let port_held = |n: u32, slot: usize| {
            let t = self.workloads[slot].as_ref().expect("checked workload");
            t.spec.ports_exclusive
                && t.spec.needs.fixed_ports.iter().any(|p| {
                    let at = ports.partition_point(|h| (h.0, h.1) < (n, *p));
                    ports[at..]
                        .iter()
                        .take_while(|h| (h.0, h.1) == (n, *p))
                        .any(|h| h.2 != slot)
                })
        };
        // Room at the end is at most what the pass saw when it gave up on a replica or let two
        // share a zone (lower levels only take room), so it must not fit them now either.
        let has_room = |n: u32, request: &Resources| {
            if !self.nodes.spec(n).available() {
                return false;
            }
            let cap = self.nodes.capacity[n as usize];
            let room = cap.saturating_sub(&used.get(&n).copied().unwrap_or_default());
            request.fits_in(&cap) && request.fits_in(&room)
        };
        for (slot, zones) in shared {
            let t = self.workloads[slot].as_ref().expect("checked workload");
            for &n in &self.classes.get(t.class).nodes {
                assert!(
                    zones.binary_search(&self.nodes.zone[n as usize]).is_ok()
                        || !has_room(n, &t.spec.request)
                        || port_held(n, slot),
                    "{}: replicas share a zone while {} in an unused zone has room",
                    t.spec.id,
                    self.nodes.ids[n as usize]
                );
            }
        }
        for (slot, held) in waiting {
            let t = self.workloads[slot].as_ref().expect("checked workload");
            for &n in &self.classes.get(t.class).nodes {
                assert!(
                    held.binary_search(&n).is_ok()
                        || !has_room(n, &t.spec.request)
                        || port_held(n, slot),
                    "{}: a replica is unschedulable while {} has room",
                    t.spec.id,
                    self.nodes.ids[n as usize]
                );
            }
        }
        assert_eq!(
            self.placement.assigned.len() + self.placement.unschedulable.len(),
            expected
        );
    }
}
