//! The incremental engine: the cached rankings and tables of a placement, updated by one change at
//! a time, with the capacity pass replayed when the placement is asked for.
//!
//! **Invariant:** after any sequence of changes, [`PlacementEngine::placement`] equals
//! [`super::place`] of the engine's current nodes and workloads, bit for bit. It holds by
//! construction (rankings are exact prefixes; the pass is a function of the orders alone) and the
//! property tests check it after random sequences of changes.

use std::collections::HashMap;

use super::greedy::Outcome;
use super::hash::{workload_hash, RequestScale};
use super::model::{check_node, check_workload, InputError, Node, Placement, ReplicaId, Workload};
use super::rank::{Ranking, Scan};
use super::table::{eligible, ClassTable, NodeTable};

/// A workload and its cached ranking.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    /// The spec, constraints sorted and deduplicated.
    pub spec: Workload,
    pub hash: u64,
    pub class: u32,
    pub scale: RequestScale,
    pub ranking: Ranking,
    /// Why no node is eligible, as of a node epoch (computing it scans every node).
    pub empty_reason: Option<(u64, super::model::Unschedulable)>,
}

/// Incremental placement: feed it changes with `handle_*`, read the result with `placement`.
#[derive(Clone, Debug)]
pub struct PlacementEngine {
    pub(super) nodes: NodeTable,
    pub(super) classes: ClassTable,
    pub(super) workloads: Vec<Option<Tracked>>,
    workload_slots: HashMap<String, u32>,
    free_workloads: Vec<u32>,
    /// Workload slots in canonical order; rebuilt when `order_stale`.
    pub(super) order: Vec<u32>,
    pub(super) order_stale: bool,
    pub(super) outcomes: Vec<Vec<Outcome>>,
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
            workload_slots: HashMap::new(),
            free_workloads: Vec::new(),
            order: Vec::new(),
            order_stale: true,
            outcomes: Vec::new(),
            placement: Placement::default(),
            stale: true,
            node_epoch: 0,
        };
        let mut rejected = Vec::new();
        let mut node_ids: HashMap<&str, u32> = HashMap::new();
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
        let mut workload_ids: HashMap<&str, u32> = HashMap::new();
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

    fn scan<'a>(
        nodes: &'a NodeTable,
        classes: &'a ClassTable,
        spec: &Workload,
        t: &Tracked,
    ) -> Scan<'a> {
        Scan {
            nodes,
            eligible: &classes.get(t.class).nodes,
            workload_hash: t.hash,
            request: spec.request,
            scale: t.scale,
            replicas: spec.replicas,
        }
    }

    fn insert_workload(&mut self, spec: Workload) {
        let class = self.classes.acquire(&spec.constraints, &self.nodes);
        let hash = workload_hash(&spec.id);
        let scale = RequestScale::new(&spec.request);
        let scan = Scan {
            nodes: &self.nodes,
            eligible: &self.classes.get(class).nodes,
            workload_hash: hash,
            request: spec.request,
            scale,
            replicas: spec.replicas,
        };
        let ranking = Ranking::build(&scan);
        let tracked = Tracked {
            spec,
            hash,
            class,
            scale,
            ranking,
            empty_reason: None,
        };
        let slot = match self.free_workloads.pop() {
            Some(slot) => slot,
            None => {
                self.workloads.push(None);
                self.outcomes.push(Vec::new());
                (self.workloads.len() - 1) as u32
            }
        };
        self.workload_slots.insert(tracked.spec.id.clone(), slot);
        self.workloads[slot as usize] = Some(tracked);
        self.order_stale = true;
        self.stale = true;
    }

    /// A node joined. Err (state unchanged) when it is invalid or already present.
    pub fn handle_node_added(&mut self, node: Node) -> Result<(), InputError> {
        check_node(&node)?;
        if self.nodes.slot(&node.id).is_some() {
            return Err(InputError::NodeExists { id: node.id });
        }
        let slot = self.nodes.insert(node);
        self.classes.node_added(slot, &self.nodes);
        let spec = self.nodes.spec(slot);
        let fits: Vec<bool> = self
            .classes
            .classes
            .iter()
            .map(|c| c.as_ref().is_some_and(|c| eligible(spec, &c.constraints)))
            .collect();
        for t in self.workloads.iter_mut().flatten() {
            if fits[t.class as usize] {
                let scan = Self::scan(&self.nodes, &self.classes, &t.spec, t);
                t.ranking.node_added(&scan, slot);
            }
        }
        self.node_epoch += 1;
        self.stale = true;
        Ok(())
    }

    /// A node left (or was declared dead). Err (state unchanged) when it is unknown.
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
                let scan = Self::scan(&self.nodes, &self.classes, &t.spec, t);
                t.ranking.node_removed(&scan, slot);
            }
        }
        self.classes.node_removed(slot, &self.nodes);
        self.nodes.remove(slot);
        self.node_epoch += 1;
        self.stale = true;
        Ok(())
    }

    /// A node's capacity, labels, zone or draining flag changed. Err (state unchanged) when the new
    /// record is invalid or the node unknown.
    pub fn handle_node_changed(&mut self, node: Node) -> Result<(), InputError> {
        check_node(&node)?;
        if self.nodes.slot(&node.id).is_none() {
            return Err(InputError::UnknownNode { id: node.id });
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
        let rescale = t.spec.replicas != spec.replicas;
        self.order_stale |= t.spec.priority != spec.priority;
        t.spec = spec;
        if rescale {
            let scan = Self::scan(&self.nodes, &self.classes, &t.spec, t);
            t.ranking.rescale(&scan);
        }
        self.stale = true;
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
        self.free_workloads.push(slot);
        self.order_stale = true;
        self.stale = true;
    }
}
