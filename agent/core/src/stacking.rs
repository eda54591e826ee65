//! Stacking: more replicas than eligible nodes.
//!
//! Placement puts the replicas of one workload on distinct nodes. When a workload asks for more
//! replicas than there are nodes that could ever hold one (up, not draining, matching its
//! constraints, with the capacity for one replica), distinct nodes are impossible; operators
//! still expect the service to run, as Kubernetes and Nomad do, with replicas doubled up as
//! evenly as possible. [`place_stacked`] does that deterministically: such a workload of `R`
//! replicas over `E` eligible nodes is split into layers of `E` replicas (the last one shorter),
//! each layer placed as its own workload on distinct nodes, so no node holds more than
//! `ceil(R / E)` replicas of it. Replica `r` is in layer `r / E`. With `R <= E` nothing changes.
//!
//! Layers are named `NAME~K`; `~` cannot appear in a workload name (a DNS label), so layer names
//! never collide with real workloads.

use std::collections::BTreeMap;

use crate::placement::model::{Node, ReplicaId, Unschedulable, Workload};
use crate::placement::{place, Placement};

/// Separates a workload name from its layer number.
const LAYER_SEP: char = '~';

/// How many nodes could ever hold one replica of `w` (ignoring what else they hold).
pub fn eligible_nodes(nodes: &[Node], w: &Workload) -> usize {
    nodes
        .iter()
        .filter(|n| n.available())
        .filter(|n| w.request.fits_in(&n.capacity))
        .filter(|n| {
            w.constraints
                .iter()
                .all(|c| c.matches(&n.labels, &n.zone, &n.id))
        })
        .count()
}

/// [`place`], with workloads that have more replicas than eligible nodes split into layers.
pub fn place_stacked(nodes: &[Node], workloads: &[Workload]) -> Placement {
    let mut layered: Vec<Workload> = Vec::with_capacity(workloads.len());
    let mut layer_size: BTreeMap<String, u32> = BTreeMap::new();
    for w in workloads {
        let eligible = eligible_nodes(nodes, w) as u32;
        if eligible == 0 || w.replicas <= eligible {
            layered.push(w.clone());
            continue;
        }
        layer_size.insert(w.id.clone(), eligible);
        let layers = w.replicas.div_ceil(eligible);
        for k in 0..layers {
            let mut layer = w.clone();
            layer.id = format!("{}{LAYER_SEP}{k}", w.id);
            layer.replicas = eligible.min(w.replicas - k * eligible);
            layered.push(layer);
        }
    }
    if layer_size.is_empty() {
        return place(nodes, workloads);
    }
    let placed = place(nodes, &layered);
    let unlayer = |id: ReplicaId| -> ReplicaId {
        match id.workload.split_once(LAYER_SEP) {
            Some((name, k)) if layer_size.contains_key(name) => {
                let k: u32 = k.parse().expect("layer names are generated here");
                ReplicaId {
                    workload: name.to_string(),
                    replica: k * layer_size[name] + id.replica,
                }
            }
            _ => id,
        }
    };
    let assigned = placed
        .assigned
        .into_iter()
        .map(|(id, node)| (unlayer(id), node))
        .collect();
    let unschedulable: BTreeMap<ReplicaId, Unschedulable> = placed
        .unschedulable
        .into_iter()
        .map(|(id, why)| (unlayer(id), why))
        .collect();
    Placement {
        assigned,
        unschedulable,
        rejected: placed.rejected,
    }
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
        let nodes: Vec<Node> = (1..=5).map(|i| node(&format!("n{i}"))).collect();
        assert_eq!(
            place_stacked(&nodes, &[workload(5)]),
            place(&nodes, &[workload(5)])
        );
    }

    #[test]
    fn draining_and_ineligible_nodes_do_not_count() {
        let mut nodes: Vec<Node> = (1..=3).map(|i| node(&format!("n{i}"))).collect();
        nodes[2].draining = true;
        let p = place_stacked(&nodes, &[workload(4)]);
        assert_eq!(p.assigned.len(), 4);
        assert!(p.assigned.values().all(|n| n != "n3"));
        assert!(per_node(&p).values().all(|&c| c == 2), "{p:?}");
    }
}
