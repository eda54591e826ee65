//! Stacking: more replicas than eligible nodes.
//!
//! Placement puts the replicas of one workload on distinct nodes. When a workload asks for more
//! replicas than there are nodes that could hold one, distinct nodes are impossible; operators
//! still expect the service to run, as Kubernetes and Nomad do, with replicas doubled up as
//! evenly as possible. [`place_stacked`] does that deterministically, in two steps:
//!
//! 1. **Layers.** A workload of `R` replicas with `K` known eligible nodes (up, down or draining,
//!    matching its constraints, able to run it, with the capacity for one replica) and `R > K` is split into
//!    layers of `K` replicas (the last one shorter), each placed as its own workload on distinct
//!    nodes. Replica `r` is in layer `r / K`. Counting known nodes, not only the available ones,
//!    keeps the layers (and so every replica's home in the ideal placement) the same while nodes
//!    go down and come back. Layer 0 keeps the workload's name and every replica keeps its index
//!    (a layer is a [`Share`]), so scaling past `K` leaves the first `K` replicas where they were.
//! 2. **Overflow.** Replicas left unschedulable because every available eligible node already
//!    holds a sibling of their layer (`NotEnoughNodes`: nodes are down or draining) are placed
//!    again, in overflow layers of as many replicas as there are available eligible nodes below
//!    the even level (those already holding `ceil(replicas / available nodes)` of the workload
//!    take no overflow), into the room the first step left. So 6 replicas on 5 nodes keep running, at most two per node,
//!    when one node fails; and a node cut off from the rest keeps its own replicas and adds what
//!    fits, never more than its capacity.
//!
//! Layers after the first are named `NAME~K` and overflow layers `NAME~+K`; `~` cannot appear in a
//! workload name (a DNS label), so these names never collide with real workloads. With `R <= K`
//! and every replica placed, nothing changes: the result is [`place`](crate::placement::place)'s.
//!
//! Every layer, overflow layers included, is a clone of the workload and keeps its
//! [`sticky`](Workload::sticky) holders, keyed by the real replica index: a replica of any layer
//! prefers the node holding its data. In an overflow layer the holder counts only if it is still
//! among the nodes with room left and below the even level; otherwise it is ignored as any
//! unknown or ineligible holder is, and the replica takes the room left like the others.
//!
//! [`place_stacked_shares`] does the same for shares of workloads (a cell's replicas of each).

use std::collections::BTreeMap;

use crate::constraint::{Constraint, ConstraintOp};
use crate::placement::model::{Node, ReplicaId, Share, Unschedulable, Workload};
use crate::placement::{place_shares, Placement};
use crate::Resources;

mod placer;

pub use placer::{node_level, NodeMemo, StackedPlacer};

/// Separates a workload name from its layer number.
const LAYER_SEP: char = '~';

/// Marks an overflow layer.
const OVERFLOW: char = '+';

/// How many nodes could ever hold one replica of `w` (ignoring what else they hold); with
/// `available_only`, only those up and not draining.
pub fn eligible_nodes(nodes: &[Node], w: &Workload, available_only: bool) -> usize {
    eligible_up_to(nodes, w, available_only, usize::MAX)
}

/// [`eligible_nodes`], counting no further than `limit` (most workloads have far fewer replicas
/// than the mesh has nodes: the first few hundred nodes settle that they need no layers).
fn eligible_up_to(nodes: &[Node], w: &Workload, available_only: bool, limit: usize) -> usize {
    nodes
        .iter()
        .filter(|n| !available_only || n.available())
        .filter(|n| eligible_for(n, w))
        .take(limit)
        .count()
}

/// The node could hold one replica of `w`: its constraints match, it meets the replica's needs
/// (placement algorithm 7: a runtime, host paths, ports; as the capacity pass's eligibility) and
/// the request fits.
fn eligible_for(n: &Node, w: &Workload) -> bool {
    w.request.fits_in(&n.capacity)
        && w.constraints
            .iter()
            .all(|c| c.matches(&n.labels, &n.zone, &n.id))
        && w.needs.unmet(n.caps.as_ref()).is_none()
}

/// [`place`](crate::placement::place), with workloads that have more replicas than eligible
/// nodes split into layers, and replicas that the nodes down or draining leave without a node of
/// their own placed in overflow layers.
pub fn place_stacked(nodes: &[Node], workloads: &[Workload]) -> Placement {
    let shares: Vec<Share> = workloads.iter().cloned().map(Share::whole).collect();
    place_stacked_shares(nodes, &shares)
}

/// [`place_stacked`] for shares of workloads: only the replicas each share names are placed,
/// each ranked by its own index as when the whole workload is placed.
pub fn place_stacked_shares(nodes: &[Node], shares: &[Share]) -> Placement {
    let (layered, origin) = layers(nodes, shares);
    let placed = place_shares(nodes, &layered);
    finish(nodes, shares, placed, &origin)
}

/// Where a layer's replicas come from: layer id to workload id (layer 0 keeps the workload's).
type Origin = BTreeMap<String, String>;

/// Step 1's inputs: every share, or its layers over the known eligible nodes.
fn layers(nodes: &[Node], shares: &[Share]) -> (Vec<Share>, Origin) {
    let mut layered: Vec<Share> = Vec::with_capacity(shares.len());
    let mut origin: Origin = BTreeMap::new();
    for s in shares {
        let placed = s.indices.len();
        let known = eligible_up_to(nodes, &s.workload, false, placed);
        if known == 0 || placed <= known {
            layered.push(s.clone());
            continue;
        }
        for (k, chunk) in s.indices.chunks(known).enumerate() {
            let mut layer = s.clone();
            layer.indices = chunk.to_vec();
            if k > 0 {
                layer.workload.id = format!("{}{LAYER_SEP}{k}", s.workload.id);
                origin.insert(layer.workload.id.clone(), s.workload.id.clone());
            }
            layered.push(layer);
        }
    }
    (layered, origin)
}

/// Step 1's placement of the layers back under the workloads' own names, then step 2.
fn finish(nodes: &[Node], shares: &[Share], placed: Placement, origin: &Origin) -> Placement {
    let unlayer = |id: ReplicaId| match origin.get(&id.workload) {
        Some(name) => ReplicaId::new(name, id.replica),
        None => id,
    };
    let mut out = Placement {
        assigned: placed
            .assigned
            .into_iter()
            .map(|(id, node)| (unlayer(id), node))
            .collect(),
        unschedulable: placed
            .unschedulable
            .into_iter()
            .map(|(id, why)| (unlayer(id), why))
            .collect(),
        rejected: placed.rejected,
    };

    // Step 2: overflow, into the room step 1 left.
    let mut overflow: Vec<Share> = Vec::new();
    let mut overflow_origin: Origin = BTreeMap::new();
    // The replicas waiting for a node of their own, by workload, in index order (one pass over
    // what is unschedulable, not one search per replica of every workload).
    let mut waiting_of: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (id, why) in &out.unschedulable {
        if matches!(why, Unschedulable::NotEnoughNodes { .. }) {
            waiting_of
                .entry(id.workload.as_str())
                .or_default()
                .push(id.replica);
        }
    }
    // How many replicas of each of those workloads every node holds.
    let mut held: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (id, node) in &out.assigned {
        if waiting_of.contains_key(id.workload.as_str()) {
            *held
                .entry((id.workload.as_str(), node.as_str()))
                .or_default() += 1;
        }
    }
    for s in shares {
        let w = &s.workload;
        let Some(waiting) = waiting_of.get(w.id.as_str()) else {
            continue;
        };
        let waiting: Vec<u32> = waiting
            .iter()
            .copied()
            .filter(|r| s.indices.binary_search(r).is_ok())
            .collect();
        let available: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.available() && eligible_for(n, w))
            .collect();
        if waiting.is_empty() || available.is_empty() {
            continue;
        }
        // Double up evenly: nodes that already hold the level every node would reach take no
        // overflow (a constraint on the built-in `node` key).
        let count = |n: &Node| {
            held.get(&(w.id.as_str(), n.id.as_str()))
                .copied()
                .unwrap_or(0)
        };
        let total = available.iter().map(|n| count(n)).sum::<usize>() + waiting.len();
        let level = total.div_ceil(available.len());
        let mut full: Vec<String> = available
            .iter()
            .filter(|n| count(n) >= level)
            .map(|n| n.id.clone())
            .collect();
        full.sort();
        let open = available.len() - full.len();
        for (k, chunk) in waiting.chunks(open.max(1)).enumerate() {
            let mut layer = s.clone();
            layer.workload.id = format!("{}{LAYER_SEP}{OVERFLOW}{k}", s.workload.id);
            layer.indices = chunk.to_vec();
            if !full.is_empty() {
                layer.workload.constraints.push(Constraint {
                    key: "node".into(),
                    op: ConstraintOp::NotIn(full.clone()),
                });
            }
            overflow_origin.insert(layer.workload.id.clone(), s.workload.id.clone());
            overflow.push(layer);
        }
    }
    if overflow.is_empty() {
        return out;
    }
    let requests: BTreeMap<&str, Resources> = shares
        .iter()
        .map(|s| (s.workload.id.as_str(), s.workload.request))
        .collect();
    let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
    for (id, node) in &out.assigned {
        let u = used.entry(node.as_str()).or_default();
        *u = u.saturating_add(&requests[id.workload.as_str()]);
    }
    let left: Vec<Node> = nodes
        .iter()
        .filter_map(|n| {
            let mut n = n.clone();
            n.capacity = n
                .capacity
                .saturating_sub(&used.get(n.id.as_str()).copied().unwrap_or_default());
            (n.capacity.cpu_millis > 0 && n.capacity.memory_bytes > 0).then_some(n)
        })
        .collect();
    let extra = place_shares(&left, &overflow);
    let back = |id: &ReplicaId| ReplicaId::new(&overflow_origin[&id.workload], id.replica);
    for (id, node) in &extra.assigned {
        let id = back(id);
        out.unschedulable.remove(&id);
        out.assigned.insert(id, node.clone());
    }
    for (id, why) in extra.unschedulable {
        out.unschedulable.insert(back(&id), why);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::model::Spread;
    use crate::Resources;

    fn node(id: &str) -> Node {
        Node {
            id: id.into(),
            capacity: Resources::new(4000, 8 << 30),
            labels: Default::default(),
            zone: "z".into(),
            draining: false,
            down: false,
            caps: None,
        }
    }

    fn workload(replicas: u32) -> Workload {
        Workload {
            id: "web".into(),
            replicas,
            request: Resources::new(100, 16 << 20),
            spread: Spread::Node,
            constraints: vec![],
            exclusive: false,
            priority: 0,
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        }
    }

    fn per_node(p: &Placement) -> BTreeMap<String, u32> {
        let mut count = BTreeMap::new();
        for node in p.assigned.values() {
            *count.entry(node.clone()).or_default() += 1;
        }
        count
    }

    #[test]
    fn more_replicas_than_nodes_double_up_evenly() {
        let nodes: Vec<Node> = (1..=5).map(|i| node(&format!("n{i}"))).collect();
        let p = place_stacked(&nodes, &[workload(6)]);
        assert_eq!(p.assigned.len(), 6, "{p:?}");
        assert!(p.unschedulable.is_empty());
        let counts = per_node(&p);
        assert_eq!(counts.len(), 5, "every node used");
        assert!(counts.values().all(|&c| c <= 2), "{counts:?}");
        for r in 0..6 {
            assert!(
                p.assigned.contains_key(&ReplicaId::new("web", r)),
                "replica {r}"
            );
        }
        let four = place_stacked(&nodes[..4], &[workload(6)]);
        assert_eq!(four.assigned.len(), 6);
        assert!(per_node(&four).values().all(|&c| c <= 2));
    }

    #[test]
    fn enough_nodes_is_plain_placement() {
        use crate::placement::place;
        let nodes: Vec<Node> = (1..=5).map(|i| node(&format!("n{i}"))).collect();
        assert_eq!(
            place_stacked(&nodes, &[workload(5)]),
            place(&nodes, &[workload(5)])
        );
    }

    #[test]
    fn draining_and_down_nodes_get_nothing_and_the_rest_double_up() {
        let mut nodes: Vec<Node> = (1..=3).map(|i| node(&format!("n{i}"))).collect();
        nodes[2].draining = true;
        let p = place_stacked(&nodes, &[workload(4)]);
        assert_eq!(p.assigned.len(), 4, "{p:?}");
        assert!(p.assigned.values().all(|n| n != "n3"));
        assert!(per_node(&p).values().all(|&c| c == 2), "{p:?}");
    }

    /// 6 replicas on 5 nodes, one node fails: every replica still runs, at most two per node, and
    /// the replicas on the surviving nodes stay where they were.
    #[test]
    fn a_node_down_keeps_every_replica_running_and_the_rest_in_place() {
        let mut nodes: Vec<Node> = (1..=5).map(|i| node(&format!("n{i}"))).collect();
        let before = place_stacked(&nodes, &[workload(6)]);
        for victim in 0..5 {
            nodes[victim].down = true;
            let after = place_stacked(&nodes, &[workload(6)]);
            let gone = &nodes[victim].id;
            assert_eq!(after.assigned.len(), 6, "{gone} down: {after:?}");
            assert!(after.assigned.values().all(|n| n != gone));
            assert!(per_node(&after).values().all(|&c| c <= 2), "{after:?}");
            for (r, n) in &before.assigned {
                if n != gone {
                    assert_eq!(after.assigned.get(r), Some(n), "{r} moved off {n}");
                }
            }
            nodes[victim].down = false;
            assert_eq!(place_stacked(&nodes, &[workload(6)]), before);
        }
    }

    /// A node cut off from the rest (every other node down in its view) keeps its own replica and
    /// adds what fits, never more than its capacity.
    #[test]
    fn a_node_alone_keeps_its_own_and_fills_only_its_capacity() {
        let mut nodes: Vec<Node> = (1..=20).map(|i| node(&format!("n{i}"))).collect();
        for n in &mut nodes {
            n.capacity = Resources::new(4000, 8 << 30);
        }
        let mut web = workload(12);
        web.request = Resources::new(500, 512 << 20);
        let before = place_stacked(&nodes, std::slice::from_ref(&web));
        // The node of replica 0 (placement version 3 had one on n9; version 4 has none there).
        let alone = before.assigned[&ReplicaId::new("web", 0)].clone();
        let alone = alone.as_str();
        let own: Vec<&ReplicaId> = before
            .assigned
            .iter()
            .filter(|(_, n)| *n == alone)
            .map(|(r, _)| r)
            .collect();
        assert!(!own.is_empty(), "{before:?}");
        for n in &mut nodes {
            n.down = n.id != alone;
        }
        let after = place_stacked(&nodes, &[web]);
        for r in own {
            assert_eq!(after.assigned.get(r).map(String::as_str), Some(alone));
        }
        assert_eq!(after.assigned.len(), 8, "4000m holds 8 of 500m: {after:?}");
        assert_eq!(after.unschedulable.len(), 4);
    }
}
