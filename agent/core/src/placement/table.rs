//! The engine's view of the membership: nodes in reusable slots, and constraint classes (the
//! distinct constraint sets of the workloads) with the nodes eligible for each.
//!
//! Slot numbers and the order of the lists here depend on the order changes arrived in. Nothing
//! that reaches an output depends on them: rankings are ordered by (key, node id), claims by
//! (rank, pair hash, canonical workload order, replica index), and guests go in canonical order.
//! The hash maps are only looked up, never iterated.

use super::hash::{node_hash, zone_hash};
use super::model::{Needs, Node};
use crate::constraint::Constraint;
use crate::resources::Resources;
use crate::stable_hash::StableHashMap;

/// Live nodes by slot, structure-of-arrays for the scan loop.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeTable {
    pub ids: Vec<String>,
    pub hashes: Vec<u64>,
    pub capacity: Vec<Resources>,
    pub zone: Vec<u32>,
    /// Bumped each time a slot is filled, so that a reused slot is never mistaken for its old node.
    pub generation: Vec<u64>,
    pub specs: Vec<Option<Node>>,
    by_id: StableHashMap<String, u32>,
    free: Vec<u32>,
    next_generation: u64,
    zones: StableHashMap<String, u32>,
    /// Hash of each zone's name, by zone number.
    pub zone_hashes: Vec<u64>,
    /// Each zone's name, by zone number.
    pub zone_names: Vec<String>,
    /// Number of live nodes.
    pub count: usize,
}

impl NodeTable {
    pub fn slot(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    /// The number of a zone some node has had, by name.
    pub fn zone_number(&self, name: &str) -> Option<u32> {
        self.zones.get(name).copied()
    }

    /// Adds a validated node whose id is not present; returns its slot.
    pub fn insert(&mut self, node: Node) -> u32 {
        assert!(
            !self.by_id.contains_key(&node.id),
            "node {} inserted twice",
            node.id
        );
        let zone = match self.zones.get(&node.zone) {
            Some(&z) => z,
            None => {
                let z = self.zone_names.len() as u32;
                self.zones.insert(node.zone.clone(), z);
                self.zone_hashes.push(zone_hash(&node.zone));
                self.zone_names.push(node.zone.clone());
                z
            }
        };
        self.next_generation += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                let s = slot as usize;
                self.ids[s] = node.id.clone();
                self.hashes[s] = node_hash(&node.id);
                self.capacity[s] = node.capacity;
                self.zone[s] = zone;
                self.generation[s] = self.next_generation;
                self.specs[s] = Some(node.clone());
                slot
            }
            None => {
                self.ids.push(node.id.clone());
                self.hashes.push(node_hash(&node.id));
                self.capacity.push(node.capacity);
                self.zone.push(zone);
                self.generation.push(self.next_generation);
                self.specs.push(Some(node.clone()));
                (self.ids.len() - 1) as u32
            }
        };
        self.by_id.insert(node.id, slot);
        self.count += 1;
        slot
    }

    /// Sets the node's draining and down flags (they change no ranking).
    pub fn set_status(&mut self, slot: u32, draining: bool, down: bool) {
        let node = self.specs[slot as usize]
            .as_mut()
            .expect("status of a free slot");
        node.draining = draining;
        node.down = down;
    }

    /// True when some live slot's node is down or draining.
    pub fn any_unavailable(&self) -> bool {
        self.specs.iter().flatten().any(|n| !n.available())
    }

    /// Removes the node in `slot` and returns it.
    pub fn remove(&mut self, slot: u32) -> Node {
        let node = self.specs[slot as usize]
            .take()
            .expect("removing a free slot");
        self.by_id.remove(&node.id);
        self.capacity[slot as usize] = Resources::default();
        self.free.push(slot);
        self.count -= 1;
        node
    }

    /// Live nodes' slots, in slot order.
    pub fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as u32)
    }

    pub fn spec(&self, slot: u32) -> &Node {
        self.specs[slot as usize].as_ref().expect("free slot")
    }
}

/// True when `node` is in the rankings of a workload with these constraints and needs. Down and
/// draining nodes are: they keep their place, and the capacity pass gives them nothing.
pub(crate) fn eligible(node: &Node, constraints: &[Constraint], needs: &Needs) -> bool {
    constraints
        .iter()
        .all(|c| c.matches(&node.labels, &node.zone, &node.id))
        && needs.unmet(node.caps.as_ref()).is_none()
}

/// One distinct (constraint set, needs) pair and the known nodes that satisfy it.
#[derive(Clone, Debug)]
pub(crate) struct ConstraintClass {
    pub constraints: Vec<Constraint>,
    pub needs: Needs,
    /// Eligible node slots, in no particular order.
    pub nodes: Vec<u32>,
    /// Eligible node slots per zone number, in no particular order (a zone-spread replica's
    /// candidates are its home zone's).
    zone_nodes: Vec<Vec<u32>>,
    /// Zones with at least one eligible node.
    pub zones: u32,
    /// Bumped whenever the set of zones with an eligible node changes.
    pub zone_epoch: u64,
    users: u32,
}

impl ConstraintClass {
    fn add(&mut self, slot: u32, zone: u32) {
        self.nodes.push(slot);
        let z = zone as usize;
        if self.zone_nodes.len() <= z {
            self.zone_nodes.resize(z + 1, Vec::new());
        }
        if self.zone_nodes[z].is_empty() {
            self.zones += 1;
            self.zone_epoch += 1;
        }
        self.zone_nodes[z].push(slot);
    }

    /// Zone numbers with at least one eligible node, ascending.
    pub fn zone_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.zone_nodes
            .iter()
            .enumerate()
            .filter(|(_, nodes)| !nodes.is_empty())
            .map(|(z, _)| z as u32)
    }

    /// The eligible nodes of one zone number (none for an unknown zone).
    pub fn nodes_in_zone(&self, zone: u32) -> &[u32] {
        self.zone_nodes
            .get(zone as usize)
            .map_or(&[], Vec::as_slice)
    }

    fn remove(&mut self, slot: u32, zone: u32) -> bool {
        // Linear, but only for the classes the node is eligible for, once per removal.
        let Some(at) = self.nodes.iter().position(|&n| n == slot) else {
            return false;
        };
        self.nodes.swap_remove(at);
        let in_zone = &mut self.zone_nodes[zone as usize];
        let at = in_zone
            .iter()
            .position(|&n| n == slot)
            .expect("eligible node missing from its zone");
        in_zone.swap_remove(at);
        if in_zone.is_empty() {
            self.zones -= 1;
            self.zone_epoch += 1;
        }
        true
    }
}

/// The constraint classes in use.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClassTable {
    pub classes: Vec<Option<ConstraintClass>>,
    by_constraints: StableHashMap<(Vec<Constraint>, Needs), u32>,
    free: Vec<u32>,
}

impl ClassTable {
    pub fn get(&self, class: u32) -> &ConstraintClass {
        self.classes[class as usize].as_ref().expect("free class")
    }

    /// The class of a (sorted, deduplicated) constraint set and canonical needs, created if new.
    pub fn acquire(&mut self, constraints: &[Constraint], needs: &Needs, nodes: &NodeTable) -> u32 {
        let key = (constraints.to_vec(), needs.clone());
        if let Some(&c) = self.by_constraints.get(&key) {
            self.classes[c as usize].as_mut().expect("free class").users += 1;
            return c;
        }
        let mut class = ConstraintClass {
            constraints: constraints.to_vec(),
            needs: needs.clone(),
            nodes: Vec::new(),
            zone_nodes: Vec::new(),
            zones: 0,
            zone_epoch: 0,
            users: 1,
        };
        for slot in nodes.live_slots() {
            if eligible(nodes.spec(slot), constraints, needs) {
                class.add(slot, nodes.zone[slot as usize]);
            }
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.classes[id as usize] = Some(class);
                id
            }
            None => {
                self.classes.push(Some(class));
                (self.classes.len() - 1) as u32
            }
        };
        self.by_constraints.insert(key, id);
        id
    }

    /// Drops one user of a class; the class goes when its last user does.
    pub fn release(&mut self, class: u32) {
        let c = self.classes[class as usize].as_mut().expect("free class");
        c.users -= 1;
        if c.users == 0 {
            let c = self.classes[class as usize].take().expect("free class");
            self.by_constraints.remove(&(c.constraints, c.needs));
            self.free.push(class);
        }
    }

    /// Records a new node in every class it is eligible for.
    pub fn node_added(&mut self, slot: u32, nodes: &NodeTable) {
        let node = nodes.spec(slot);
        for class in self.classes.iter_mut().flatten() {
            if eligible(node, &class.constraints, &class.needs) {
                class.add(slot, nodes.zone[slot as usize]);
            }
        }
    }

    /// Forgets a node (call before the node table frees the slot).
    pub fn node_removed(&mut self, slot: u32, nodes: &NodeTable) {
        let node = nodes.spec(slot);
        for class in self.classes.iter_mut().flatten() {
            if eligible(node, &class.constraints, &class.needs) {
                let removed = class.remove(slot, nodes.zone[slot as usize]);
                assert!(removed, "eligible node {} missing from its class", node.id);
            }
        }
    }
}
