//! The incremental engine: the cached rankings and tables of a placement, updated by one change at
//! a time, with the capacity pass replayed when the placement is asked for.
//!
//! **Invariant:** after any sequence of changes, [`PlacementEngine::placement`] equals
//! [`super::place`] of the engine's current nodes and workloads, bit for bit. It holds by
//! construction (rankings are exact prefixes; the pass is a function of the orders alone) and the
//! property tests check it after random sequences of changes.

use super::accept::Outcome;
use super::hash::{pair_hash, workload_hash, RequestScale};
use super::model::{check_node, check_workload, InputError, Node, Placement, ReplicaId, Workload};
use super::model::{Spread, Unschedulable};
use super::rank::{Ranking, Scan};
use super::table::{eligible, ClassTable, ConstraintClass, NodeTable};
use crate::stable_hash::StableHashMap;

/// A workload and its cached ranking.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    /// The spec, constraints sorted and deduplicated.
    pub spec: Workload,
    pub hash: u64,
    pub class: u32,
    pub scale: RequestScale,
    /// For zone spread: rank of each zone number among the eligible zones, as of `zone_epoch`.
    pub zone_ranks: Vec<u32>,
    pub zone_epoch: u64,
    pub ranking: Ranking,
    /// Why no node is eligible, as of a node epoch and pass (`epoch << 1 | ideal`; computing it
    /// scans every node).
    pub empty_reason: Option<(u64, Unschedulable)>,
}

impl Tracked {
    /// The workload's scan inputs, its ranking and its cached reason, borrowed apart.
    pub(crate) fn parts<'a>(
        &'a mut self,
        nodes: &'a NodeTable,
        classes: &'a ClassTable,
    ) -> (
        Scan<'a>,
        &'a mut Ranking,
        &'a mut Option<(u64, Unschedulable)>,
    ) {
        let class = classes.get(self.class);
        let scan = Scan {
            nodes,
            eligible: &class.nodes,
            workload_hash: self.hash,
            request: self.spec.request,
            scale: self.scale,
            replicas: self.spec.replicas,
            spread: self.spec.spread,
            constraints: &self.spec.constraints,
            zone_ranks: &self.zone_ranks,
            zones: class.zones,
        };
        (scan, &mut self.ranking, &mut self.empty_reason)
    }

    /// Recomputes the zone ranks when the class's zone set changed; re-splits the ranking.
    fn refresh_zones(&mut self, nodes: &NodeTable, classes: &ClassTable) {
        let class = classes.get(self.class);
        if self.spec.spread != Spread::Zone || self.zone_epoch == class.zone_epoch {
            return;
        }
        self.zone_ranks = zone_ranks(nodes, class, self.hash);
        self.zone_epoch = class.zone_epoch;
        let (scan, ranking, _) = self.parts(nodes, classes);
        ranking.rescale(&scan);
    }
}

/// Ranks the class's eligible zones for a workload by the hash of (workload, zone name).
fn zone_ranks(nodes: &NodeTable, class: &ConstraintClass, workload_hash: u64) -> Vec<u32> {
    let mut zones: Vec<u32> = class.zone_ids().collect();
    let key = |z: u32| pair_hash(workload_hash, nodes.zone_hashes[z as usize]);
    zones.sort_by(|&a, &b| {
        key(a)
            .cmp(&key(b))
            .then_with(|| nodes.zone_names[a as usize].cmp(&nodes.zone_names[b as usize]))
    });
    let mut ranks = vec![u32::MAX; nodes.zone_names.len()];
    for (rank, z) in zones.into_iter().enumerate() {
        ranks[z as usize] = rank as u32;
    }
    ranks
}

/// Incremental placement: feed it changes with `handle_*`, read the result with `placement`.
#[derive(Clone, Debug)]
pub struct PlacementEngine {
    pub(super) nodes: NodeTable,
    pub(super) classes: ClassTable,
    pub(super) workloads: Vec<Option<Tracked>>,
    workload_slots: StableHashMap<String, u32>,
    free_workloads: Vec<u32>,
    /// Workload slots in canonical order; rebuilt when `order_stale`.
    pub(super) order: Vec<u32>,
    pub(super) order_stale: bool,
    /// The actual placement's outcomes, by workload slot and replica.
    pub(super) outcomes: Vec<Vec<Outcome>>,
    /// The ideal placement's (every node as if up and not draining).
    pub(super) ideal: Vec<Vec<Outcome>>,
    /// Anything but a node's down or draining flag changed since `ideal` was computed.
    pub(super) ideal_stale: bool,
    pub(super) placement: Placement,
    pub(super) stale: bool,
    pub(super) node_epoch: u64,
}

fn canonical(mut workload: Workload) -> Workload {
    workload.constraints.sort();
    workload.constraints.dedup();
    workload
}

impl PlacementEngine {
    /// An engine over these inputs. Invalid and duplicated inputs are left out and listed in
    /// [`Placement::rejected`]; the order of the inputs does not matter.
    pub fn new(nodes: &[Node], workloads: &[Workload]) -> Self {
        let mut engine = PlacementEngine {
            nodes: NodeTable::default(),
            classes: ClassTable::default(),
            workloads: Vec::new(),
            workload_slots: StableHashMap::default(),
            free_workloads: Vec::new(),
            order: Vec::new(),
            order_stale: true,
            outcomes: Vec::new(),
            ideal: Vec::new(),
            ideal_stale: true,
            placement: Placement::default(),
            stale: true,
            node_epoch: 0,
        };
        let mut rejected = Vec::new();
        let mut node_ids: StableHashMap<&str, u32> = StableHashMap::default();
        for n in nodes {
            *node_ids.entry(n.id.as_str()).or_default() += 1;
        }
        for n in nodes {
            if node_ids[n.id.as_str()] > 1 {
                rejected.push(InputError::DuplicateNode { id: n.id.clone() });
            } else if let Err(e) = check_node(n) {
                rejected.push(e);
            } else {
                let slot = engine.nodes.insert(n.clone());
                engine.classes.node_added(slot, &engine.nodes);
            }
        }
        let mut workload_ids: StableHashMap<&str, u32> = StableHashMap::default();
        for w in workloads {
            *workload_ids.entry(w.id.as_str()).or_default() += 1;
        }
        for w in workloads {
            if workload_ids[w.id.as_str()] > 1 {
                rejected.push(InputError::DuplicateWorkload { id: w.id.clone() });
            } else if let Err(e) = check_workload(w) {
                rejected.push(e);
            } else {
                engine.insert_workload(canonical(w.clone()));
            }
        }
        rejected.sort();
        rejected.dedup();
        engine.placement.rejected = rejected;
        engine
    }

    fn insert_workload(&mut self, spec: Workload) {
        let class = self.classes.acquire(&spec.constraints, &self.nodes);
        let hash = workload_hash(&spec.id);
        let zone_ranks = match spec.spread {
            Spread::Zone => zone_ranks(&self.nodes, self.classes.get(class), hash),
            Spread::Node => Vec::new(),
        };
        let mut tracked = Tracked {
            scale: RequestScale::new(&spec.request),
            spec,
            hash,
            class,
            zone_ranks,
            zone_epoch: self.classes.get(class).zone_epoch,
            ranking: Ranking::empty(),
            empty_reason: None,
        };
        let (scan, ranking, _) = tracked.parts(&self.nodes, &self.classes);
        *ranking = Ranking::build(&scan);
        let slot = match self.free_workloads.pop() {
            Some(slot) => slot,
            None => {
                self.workloads.push(None);
                self.outcomes.push(Vec::new());
                self.ideal.push(Vec::new());
                (self.workloads.len() - 1) as u32
            }
        };
        self.workload_slots.insert(tracked.spec.id.clone(), slot);
        self.workloads[slot as usize] = Some(tracked);
        self.order_stale = true;
        self.changed();
    }

    /// Brings every zone-spread workload's zone ranks up to date with its class.
    fn refresh_zones(&mut self) {
        for t in self.workloads.iter_mut().flatten() {
            t.refresh_zones(&self.nodes, &self.classes);
        }
    }

    /// A node joined. Err (state unchanged) when it is invalid or already present.
    pub fn handle_node_added(&mut self, node: Node) -> Result<(), InputError> {
        check_node(&node)?;
        if self.nodes.slot(&node.id).is_some() {
            return Err(InputError::NodeExists { id: node.id });
        }
        let slot = self.nodes.insert(node);
        self.classes.node_added(slot, &self.nodes);
        self.refresh_zones();
        let spec = self.nodes.spec(slot);
        let fits: Vec<bool> = self
            .classes
            .classes
            .iter()
            .map(|c| c.as_ref().is_some_and(|c| eligible(spec, &c.constraints)))
            .collect();
        for t in self.workloads.iter_mut().flatten() {
            if fits[t.class as usize] {
                let (scan, ranking, _) = t.parts(&self.nodes, &self.classes);
                ranking.node_added(&scan, slot);
            }
        }
        self.node_epoch += 1;
        self.changed();
        Ok(())
    }

    /// A node left the membership for good (the agent forgets a dead node after chitchat's grace
    /// period). A node that failed but is still known is changed to `down` instead, which keeps
    /// its place in the rankings. Err (state unchanged) when it is unknown.
    pub fn handle_node_removed(&mut self, id: &str) -> Result<(), InputError> {
        let slot = self
            .nodes
            .slot(id)
            .ok_or_else(|| InputError::UnknownNode { id: id.into() })?;
        let spec = self.nodes.spec(slot);
        let fits: Vec<bool> = self
            .classes
            .classes
            .iter()
            .map(|c| c.as_ref().is_some_and(|c| eligible(spec, &c.constraints)))
            .collect();
        for t in self.workloads.iter_mut().flatten() {
            if fits[t.class as usize] {
                let (scan, ranking, _) = t.parts(&self.nodes, &self.classes);
                ranking.node_removed(&scan, slot);
            }
        }
        self.classes.node_removed(slot, &self.nodes);
        self.nodes.remove(slot);
        self.refresh_zones();
        self.node_epoch += 1;
        self.changed();
        Ok(())
    }

    /// A node's capacity, labels, zone, draining or down flag changed. Err (state unchanged) when the new
    /// record is invalid or the node unknown.
    pub fn handle_node_changed(&mut self, node: Node) -> Result<(), InputError> {
        check_node(&node)?;
        let Some(slot) = self.nodes.slot(&node.id) else {
            return Err(InputError::UnknownNode { id: node.id });
        };
        let old = self.nodes.spec(slot);
        if old.capacity == node.capacity && old.labels == node.labels && old.zone == node.zone {
            // Only the flags: no ranking changes, nor the ideal placement.
            if old.draining != node.draining || old.down != node.down {
                self.nodes.set_status(slot, node.draining, node.down);
                self.node_epoch += 1;
                self.stale = true;
            }
            return Ok(());
        }
        self.handle_node_removed(&node.id)?;
        self.handle_node_added(node)
    }

    /// A workload was created or its spec changed. Err (state unchanged) when it is invalid.
    pub fn handle_workload_upserted(&mut self, workload: Workload) -> Result<(), InputError> {
        check_workload(&workload)?;
        let spec = canonical(workload);
        let Some(&slot) = self.workload_slots.get(&spec.id) else {
            self.insert_workload(spec);
            return Ok(());
        };
        let t = self.workloads[slot as usize]
            .as_mut()
            .expect("indexed workload is gone");
        if t.spec.constraints != spec.constraints || t.spec.request != spec.request {
            self.remove_workload(slot);
            self.insert_workload(spec);
            return Ok(());
        }
        let rescale = t.spec.replicas != spec.replicas || t.spec.spread != spec.spread;
        self.order_stale |= t.spec.priority != spec.priority;
        let spread_changed = t.spec.spread != spec.spread;
        t.spec = spec;
        if spread_changed {
            t.zone_ranks = match t.spec.spread {
                Spread::Zone => zone_ranks(&self.nodes, self.classes.get(t.class), t.hash),
                Spread::Node => Vec::new(),
            };
            t.zone_epoch = self.classes.get(t.class).zone_epoch;
        }
        if rescale {
            let (scan, ranking, _) = t.parts(&self.nodes, &self.classes);
            ranking.rescale(&scan);
        }
        self.changed();
        Ok(())
    }

    /// A workload was deleted. Err (state unchanged) when it is unknown.
    pub fn handle_workload_removed(&mut self, id: &str) -> Result<(), InputError> {
        let slot = *self
            .workload_slots
            .get(id)
            .ok_or_else(|| InputError::UnknownWorkload { id: id.into() })?;
        self.remove_workload(slot);
        Ok(())
    }

    fn remove_workload(&mut self, slot: u32) {
        let t = self.workloads[slot as usize]
            .take()
            .expect("removing a free workload slot");
        self.workload_slots.remove(&t.spec.id);
        self.classes.release(t.class);
        for (replica, _) in self.outcomes[slot as usize].iter().enumerate() {
            let id = ReplicaId::new(&t.spec.id, replica as u32);
            self.placement.assigned.remove(&id);
            self.placement.unschedulable.remove(&id);
        }
        self.outcomes[slot as usize].clear();
        self.ideal[slot as usize].clear();
        self.free_workloads.push(slot);
        self.order_stale = true;
        self.changed();
    }

    /// Something other than a node's flags changed: both placements are out of date.
    fn changed(&mut self) {
        self.stale = true;
        self.ideal_stale = true;
    }
}
