//! The incremental engine: the cached rankings and tables of a placement, updated by one change at
//! a time, with the capacity pass replayed when the placement is asked for.
//!
//! **Invariant:** after any sequence of changes, [`PlacementEngine::placement`] equals
//! [`super::place`] of the engine's current nodes and workloads, bit for bit. It holds by
//! construction (rankings are exact prefixes; the pass is a function of the orders alone) and the
//! property tests check it after random sequences of changes.

use super::accept::Outcome;
use super::hash::{pair_hash, replica_offset, workload_hash, RequestScale};
use super::model::{check_node, check_share, InputError, Node, Placement, ReplicaId, Share};
use super::model::{Spread, Unschedulable, Workload};
use super::rank::{Ranking, Scan, Scratch};
use super::table::{eligible, ClassTable, ConstraintClass, NodeTable};
use crate::stable_hash::StableHashMap;

/// How many nodes a replica's fresh own list holds (extended a chunk at a time when a walk
/// reaches its end).
const OWN_INITIAL: usize = 8;

/// A zone-spread replica's home when it has none (no eligible node in the zone it is given).
pub(crate) const NO_ZONE: u32 = u32::MAX;

/// Which ranking of a workload.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Which {
    /// The workload's order over all its eligible nodes (guests, zone repair, diagnosis).
    Order,
    /// The own list of the replica at this position of `indices`.
    Replica(usize),
}

/// A workload (its share placed here) and its cached rankings.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    /// The spec, constraints sorted and deduplicated.
    pub spec: Workload,
    pub hash: u64,
    pub class: u32,
    pub scale: RequestScale,
    /// The indices of the replicas placed, ascending; position `p` in every per-replica vector
    /// is replica `indices[p]`.
    pub indices: Vec<u32>,
    /// The share's home zones (empty: the class's zones ranked by the workload's hash).
    pub home_zones: Vec<String>,
    /// For zone spread: each replica's home zone number (or [`NO_ZONE`]), as of `zone_epoch`.
    pub homes: Vec<u32>,
    pub zone_epoch: u64,
    /// Each replica's own list.
    pub rankings: Vec<Ranking>,
    /// The workload's order over all its eligible nodes, extended only when walked.
    pub order: Ranking,
    /// Why no node is eligible, as of a node epoch and pass (`epoch << 1 | ideal`; computing it
    /// scans every node).
    pub empty_reason: Option<(u64, Unschedulable)>,
}

impl Tracked {
    /// The scan of one of the workload's rankings; borrows only the tables.
    pub(crate) fn scan<'a>(
        &self,
        nodes: &'a NodeTable,
        classes: &'a ClassTable,
        which: Which,
    ) -> Scan<'a> {
        let class = classes.get(self.class);
        let (offset, candidates) = match which {
            Which::Order => (0, class.nodes.as_slice()),
            Which::Replica(p) => (
                self.offset(p),
                match self.spec.spread {
                    Spread::Node => class.nodes.as_slice(),
                    Spread::Zone => class.nodes_in_zone(self.homes[p]),
                },
            ),
        };
        Scan {
            nodes,
            candidates,
            hash: self.hash,
            offset,
            request: self.spec.request,
            scale: self.scale,
        }
    }

    /// The offset of the replica at position `p`.
    pub(crate) fn offset(&self, p: usize) -> u64 {
        replica_offset(self.hash, self.indices[p])
    }

    /// One ranking with its scan, and the cached reason, borrowed apart.
    pub(crate) fn parts<'a>(
        &'a mut self,
        nodes: &'a NodeTable,
        classes: &'a ClassTable,
        which: Which,
    ) -> (
        Scan<'a>,
        &'a mut Ranking,
        &'a mut Option<(u64, Unschedulable)>,
    ) {
        let scan = self.scan(nodes, classes, which);
        let ranking = match which {
            Which::Order => &mut self.order,
            Which::Replica(p) => &mut self.rankings[p],
        };
        (scan, ranking, &mut self.empty_reason)
    }

    /// Builds the own lists of the replicas at these positions (ascending), one pass over the
    /// candidates per group of replicas that share them (all of them; for zone spread, a home).
    fn build(
        &mut self,
        nodes: &NodeTable,
        classes: &ClassTable,
        positions: &[usize],
        scratch: &mut Scratch,
    ) {
        let mut todo: Vec<usize> = positions.to_vec();
        while let Some(&first) = todo.first() {
            let same = |p: usize| match self.spec.spread {
                Spread::Node => true,
                Spread::Zone => self.homes[p] == self.homes[first],
            };
            let (group, rest): (Vec<usize>, Vec<usize>) = todo.iter().partition(|&&p| same(p));
            let offsets: Vec<u64> = group.iter().map(|&p| self.offset(p)).collect();
            let scan = self.scan(nodes, classes, Which::Replica(first));
            let built = Ranking::build_many(&scan, &offsets, OWN_INITIAL, scratch);
            for (p, ranking) in group.into_iter().zip(built) {
                self.rankings[p] = ranking;
            }
            todo = rest;
        }
    }

    /// Every ranking the node is a candidate of, given its zone: the order, and the own lists
    /// (of a zone-spread workload, those whose home is the node's zone).
    fn for_node(
        &mut self,
        nodes: &NodeTable,
        classes: &ClassTable,
        zone: u32,
        f: impl Fn(&Scan<'_>, &mut Ranking),
    ) {
        let (scan, ranking, _) = self.parts(nodes, classes, Which::Order);
        f(&scan, ranking);
        for p in 0..self.indices.len() {
            if self.spec.spread == Spread::Zone && self.homes[p] != zone {
                continue;
            }
            let (scan, ranking, _) = self.parts(nodes, classes, Which::Replica(p));
            f(&scan, ranking);
        }
    }

    /// Recomputes the homes when the class's zone set changed, and rebuilds the own lists of the
    /// replicas whose home moved.
    fn refresh_zones(&mut self, nodes: &NodeTable, classes: &ClassTable, scratch: &mut Scratch) {
        let class = classes.get(self.class);
        if self.spec.spread != Spread::Zone || self.zone_epoch == class.zone_epoch {
            return;
        }
        let homes = homes(nodes, class, self.hash, &self.indices, &self.home_zones);
        self.zone_epoch = class.zone_epoch;
        let moved: Vec<usize> = (0..homes.len())
            .filter(|&p| homes[p] != self.homes[p])
            .collect();
        self.homes = homes;
        self.build(nodes, classes, &moved, scratch);
    }
}

/// Each replica's home zone number: the share's home zones, or else the class's eligible zones
/// ranked by the hash of (workload, zone name); replica `i` takes the one at `i % zones`.
fn homes(
    nodes: &NodeTable,
    class: &ConstraintClass,
    workload_hash: u64,
    indices: &[u32],
    home_zones: &[String],
) -> Vec<u32> {
    let zones: Vec<u32> = if home_zones.is_empty() {
        let mut zones: Vec<u32> = class.zone_ids().collect();
        let key = |z: u32| pair_hash(workload_hash, nodes.zone_hashes[z as usize]);
        zones.sort_by(|&a, &b| {
            key(a)
                .cmp(&key(b))
                .then_with(|| nodes.zone_names[a as usize].cmp(&nodes.zone_names[b as usize]))
        });
        zones
    } else {
        home_zones
            .iter()
            .map(|name| {
                nodes
                    .zone_number(name)
                    .filter(|&z| !class.nodes_in_zone(z).is_empty())
                    .unwrap_or(NO_ZONE)
            })
            .collect()
    };
    if zones.is_empty() {
        return vec![NO_ZONE; indices.len()];
    }
    indices
        .iter()
        .map(|&i| zones[i as usize % zones.len()])
        .collect()
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
    /// Buffers the ranking builds reuse.
    scratch: Scratch,
}

fn canonical(mut share: Share) -> Share {
    share.workload.constraints.sort();
    share.workload.constraints.dedup();
    share.workload.needs = std::mem::take(&mut share.workload.needs).canonical();
    share
}

impl PlacementEngine {
    /// An engine over these inputs, every replica of every workload. Invalid and duplicated
    /// inputs are left out and listed in [`Placement::rejected`]; the order of the inputs does
    /// not matter.
    pub fn new(nodes: &[Node], workloads: &[Workload]) -> Self {
        let shares: Vec<Share> = workloads.iter().cloned().map(Share::whole).collect();
        Self::with_shares(nodes, &shares)
    }

    /// An engine over these nodes and shares of workloads (some replicas of each; a workload
    /// appears in one share at most).
    pub fn with_shares(nodes: &[Node], shares: &[Share]) -> Self {
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
            scratch: Scratch::default(),
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
        for s in shares {
            *workload_ids.entry(s.workload.id.as_str()).or_default() += 1;
        }
        for s in shares {
            if workload_ids[s.workload.id.as_str()] > 1 {
                rejected.push(InputError::DuplicateWorkload {
                    id: s.workload.id.clone(),
                });
            } else if let Err(e) = check_share(s) {
                rejected.push(e);
            } else {
                engine.insert_workload(canonical(s.clone()));
            }
        }
        rejected.sort();
        rejected.dedup();
        engine.placement.rejected = rejected;
        engine
    }

    fn insert_workload(&mut self, share: Share) {
        let Share {
            workload: spec,
            indices,
            home_zones,
        } = share;
        let class = self
            .classes
            .acquire(&spec.constraints, &spec.needs, &self.nodes);
        let hash = workload_hash(&spec.id);
        let homes = match spec.spread {
            Spread::Zone => homes(
                &self.nodes,
                self.classes.get(class),
                hash,
                &indices,
                &home_zones,
            ),
            Spread::Node => Vec::new(),
        };
        let mut tracked = Tracked {
            scale: RequestScale::new(&spec.request),
            spec,
            hash,
            class,
            indices,
            home_zones,
            homes,
            zone_epoch: self.classes.get(class).zone_epoch,
            rankings: Vec::new(),
            order: Ranking::empty(),
            empty_reason: None,
        };
        let all: Vec<usize> = (0..tracked.indices.len()).collect();
        tracked.rankings = vec![Ranking::empty(); all.len()];
        tracked.build(&self.nodes, &self.classes, &all, &mut self.scratch);
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

    /// Brings every zone-spread workload's homes up to date with its class.
    fn refresh_zones(&mut self) {
        for t in self.workloads.iter_mut().flatten() {
            t.refresh_zones(&self.nodes, &self.classes, &mut self.scratch);
        }
    }

    /// Which classes a node is eligible for.
    fn classes_of(&self, slot: u32) -> Vec<bool> {
        let spec = self.nodes.spec(slot);
        self.classes
            .classes
            .iter()
            .map(|c| {
                c.as_ref()
                    .is_some_and(|c| eligible(spec, &c.constraints, &c.needs))
            })
            .collect()
    }

    /// A node joined. Err (state unchanged) when it is invalid or already present.
    pub fn handle_node_added(&mut self, node: Node) -> Result<(), InputError> {
        check_node(&node)?;
        if self.nodes.slot(&node.id).is_some() {
            return Err(InputError::NodeExists { id: node.id });
        }
        let slot = self.nodes.insert(node);
        self.classes.node_added(slot, &self.nodes);
        let fits = self.classes_of(slot);
        let zone = self.nodes.zone[slot as usize];
        for t in self.workloads.iter_mut().flatten() {
            if fits[t.class as usize] {
                t.for_node(&self.nodes, &self.classes, zone, |scan, ranking| {
                    ranking.node_added(scan, slot)
                });
            }
        }
        // After the insertions: a replica whose home moves gets a fresh own list.
        self.refresh_zones();
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
        let fits = self.classes_of(slot);
        let zone = self.nodes.zone[slot as usize];
        for t in self.workloads.iter_mut().flatten() {
            if fits[t.class as usize] {
                t.for_node(&self.nodes, &self.classes, zone, |scan, ranking| {
                    ranking.node_removed(scan, slot)
                });
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
        if old.capacity == node.capacity
            && old.labels == node.labels
            && old.zone == node.zone
            && old.caps == node.caps
        {
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

    /// A workload was created or its spec changed: all its replicas are placed. Err (state
    /// unchanged) when it is invalid.
    pub fn handle_workload_upserted(&mut self, workload: Workload) -> Result<(), InputError> {
        self.handle_share_upserted(Share::whole(workload))
    }

    /// A share of a workload was created or changed (its spec, which replicas, their home
    /// zones). Err (state unchanged) when it is invalid.
    pub fn handle_share_upserted(&mut self, share: Share) -> Result<(), InputError> {
        check_share(&share)?;
        let share = canonical(share);
        let Some(&slot) = self.workload_slots.get(&share.workload.id) else {
            self.insert_workload(share);
            return Ok(());
        };
        let t = self.workloads[slot as usize]
            .as_ref()
            .expect("indexed workload is gone");
        let spec = &share.workload;
        if t.spec.constraints != spec.constraints
            || t.spec.needs != spec.needs
            || t.spec.request != spec.request
        {
            self.remove_workload(slot);
            self.insert_workload(share);
            return Ok(());
        }
        self.order_stale |= t.spec.priority != spec.priority;
        let reshape = t.indices != share.indices
            || t.spec.spread != spec.spread
            || t.home_zones != share.home_zones;
        // Data holders count in the actual pass only: the ideal placement stands.
        let only_sticky = !reshape
            && (t.spec.replicas, t.spec.exclusive, t.spec.priority)
                == (spec.replicas, spec.exclusive, spec.priority)
            && t.spec.sticky != spec.sticky;
        if reshape {
            self.reshape(slot, share);
        } else {
            self.workloads[slot as usize]
                .as_mut()
                .expect("indexed workload is gone")
                .spec = share.workload;
        }
        if only_sticky {
            self.stale = true;
        } else {
            self.changed();
        }
        Ok(())
    }

    /// New indices, spread or home zones for a workload: the own lists of replicas that keep
    /// their index and home are kept, the others built; its outcomes start afresh.
    fn reshape(&mut self, slot: u32, share: Share) {
        self.unpublish(slot);
        let t = self.workloads[slot as usize]
            .as_mut()
            .expect("indexed workload is gone");
        // An own list keeps when its replica keeps its index, spread and home.
        let old_spread = t.spec.spread;
        let old: Vec<(u32, u32)> = (0..t.indices.len())
            .map(|p| (t.indices[p], t.homes.get(p).copied().unwrap_or(NO_ZONE)))
            .collect();
        let mut old_rankings = std::mem::take(&mut t.rankings);
        t.spec = share.workload;
        t.indices = share.indices;
        t.home_zones = share.home_zones;
        let class = self.classes.get(t.class);
        t.homes = match t.spec.spread {
            Spread::Zone => homes(&self.nodes, class, t.hash, &t.indices, &t.home_zones),
            Spread::Node => Vec::new(),
        };
        t.zone_epoch = class.zone_epoch;
        t.rankings = vec![Ranking::empty(); t.indices.len()];
        let mut fresh = Vec::new();
        for p in 0..t.indices.len() {
            let home = t.homes.get(p).copied().unwrap_or(NO_ZONE);
            let kept = old.iter().position(|&(index, old_home)| {
                old_spread == t.spec.spread && index == t.indices[p] && old_home == home
            });
            match kept {
                Some(at) => t.rankings[p] = std::mem::take(&mut old_rankings[at]),
                None => fresh.push(p),
            }
        }
        t.build(&self.nodes, &self.classes, &fresh, &mut self.scratch);
        self.outcomes[slot as usize].clear();
        self.ideal[slot as usize].clear();
    }

    /// Takes a workload's replicas out of the published placement.
    fn unpublish(&mut self, slot: u32) {
        let t = self.workloads[slot as usize]
            .as_ref()
            .expect("unpublishing a free workload slot");
        for &index in &t.indices {
            let id = ReplicaId::new(&t.spec.id, index);
            self.placement.assigned.remove(&id);
            self.placement.unschedulable.remove(&id);
        }
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
        self.unpublish(slot);
        let t = self.workloads[slot as usize]
            .take()
            .expect("removing a free workload slot");
        self.workload_slots.remove(&t.spec.id);
        self.classes.release(t.class);
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
